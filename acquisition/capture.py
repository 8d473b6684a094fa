"""Capture sets: the HDF5 file kind shared by acquisition, decoders, analysis and the GUI.

A capture set holds several *sources* (``send_pci``, ``recv_pci``, ``probe``, ...)
recorded by one or more instruments, each on its own time base, plus tables:
``truth/`` (ground truth written by the simulated rig) and ``decoded/``
(tables written by the decoders, into the set's companion file
``X.derived.h5``, :mod:`nicrig.companion`: never into the capture). The layout is documented in
``docs/formats.md`` precisely enough to read it with bare h5py; this module is
the one reader and writer.

Samples are packed as sigrok packs them: channel ``k`` is bit ``k % 8`` of byte
``k // 8`` of a sample, so a source with ``n`` channels has
``unitsize = ceil(n / 8)`` bytes per sample and its rows can be handed to
libsigrokdecode unchanged.

Times are integer picoseconds (``int64``). The common timeline of the set has
its zero at the trigger: a sample's time on it is its time on the source's own
time base, minus that of the source's trigger sample, plus the source's
``offset_ps`` (the deskew between instruments). Picoseconds, not the
nanoseconds used elsewhere, because clocked (state-mode) buses have periods
that are not whole nanoseconds (PCI-X 133: 7.5 ns).
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any, Literal

import h5py
import numpy as np

from nicrig.acquisition import limits

from nicrig.chunked import read_rows
from nicrig.errors import FormatError, UsageError
from nicrig.h5file import (
    STORAGE,
    NicrigFile,
    attr_int,
    check_stored,
    attr_json,
    attr_real,
    attr_text,
    dataset_filters,
    encode_chunk,
    encoder_pool,
    is_mapping_of,
    reading,
    storage_filters,
    takes_encoded_chunks,
    to_json,
)

FORMAT_NAME = "nicrig-capture-set"
FORMAT_VERSION = 1

#: Samples per HDF5 chunk: 64 Ki samples is 64 KiB to 1 MiB depending on width,
#: small enough that a narrow time window reads little, large enough to compress well.
DEFAULT_CHUNK_SAMPLES = 1 << 16

Mode = Literal["timing", "state"]
_VECTOR_BIT = re.compile(r"^(?P<name>.+)\[(?P<bit>\d+)\]$")


def unitsize_for(num_channels: int) -> int:
    """Bytes per packed sample for ``num_channels`` logic channels (sigrok's unitsize)."""
    return max(1, math.ceil(num_channels / 8))


def vectors_from_names(channels: Sequence[str]) -> dict[str, list[str]]:
    """Group channels named ``NAME[k]`` into vectors, bit 0 (LSB) first.

    ``["FRAME#", "AD[1]", "AD[0]"]`` gives ``{"AD": ["AD[0]", "AD[1]"]}``. A vector
    must have every bit from 0 to its width - 1; a gap is an error, since a
    vector value read with a missing bit would silently be wrong.
    """
    bits: dict[str, dict[int, str]] = {}
    for ch in channels:
        m = _VECTOR_BIT.match(ch)
        if m:
            bits.setdefault(m["name"], {})[int(m["bit"])] = ch
    vectors = {}
    for name, by_bit in bits.items():
        width = max(by_bit) + 1
        missing = sorted(set(range(width)) - set(by_bit))
        if missing:
            raise UsageError(f"vector {name!r} lacks bit(s) {missing}: channels must be {name}[0]..{name}[{width - 1}]")
        vectors[name] = [by_bit[i] for i in range(width)]
    return vectors


def pack_bits(bits: np.ndarray) -> np.ndarray:
    """Pack a ``(samples, channels)`` array of 0/1 into sigrok's layout ``(samples, unitsize)`` uint8."""
    bits = np.asarray(bits, dtype=np.uint8)
    packed = np.packbits(bits, axis=1, bitorder="little")
    return np.ascontiguousarray(packed)


def unpack_bits(packed: np.ndarray, num_channels: int) -> np.ndarray:
    """Inverse of :func:`pack_bits`: ``(samples, unitsize)`` uint8 to ``(samples, channels)`` 0/1."""
    return np.unpackbits(packed, axis=1, count=num_channels, bitorder="little")


@dataclass
class SourceSpec:
    """Everything about a source except its samples.

    ``bus`` holds the bus kind and geometry, e.g. ``{"kind": "pci", "width_bits": 64,
    "clock_hz": 66.67e6, "bars": [[0xfe000000, 0x20000]], "msi_window": [...]}``.
    ``roles`` says which channel (or vector) plays which protocol role, e.g.
    ``{"frame": "FRAME#", "ad": "AD"}``, so decoders pick their channel maps by
    themselves. ``samplerate_hz`` is required in timing mode; in state mode it is
    the nominal clock rate (informative, used when exporting to sigrok).
    """

    name: str
    channels: list[str]
    mode: Mode = "timing"
    samplerate_hz: float | None = None
    trigger_sample: int = 0
    offset_ps: int = 0
    bus: dict[str, Any] = field(default_factory=dict)
    roles: dict[str, str] = field(default_factory=dict)
    instrument: dict[str, Any] = field(default_factory=dict)
    notes: str = ""
    #: The record's length as the instrument announced it, before the first sample (an acquisition): a source
    #: holding fewer (a killed or cut-short fetch) is short. None: not known (simulated, imported).
    samples_expected: int | None = None

    def validate(self) -> None:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.-]*", self.name):
            raise UsageError(f"source name {self.name!r}: use letters, digits, '_', '.', '-'")
        if not self.channels:
            raise UsageError(f"source {self.name!r} has no channels")
        if len(set(self.channels)) != len(self.channels):
            raise UsageError(f"source {self.name!r} has duplicate channel names")
        if self.mode not in ("timing", "state"):
            raise UsageError(f"source {self.name!r}: mode must be 'timing' or 'state', not {self.mode!r}")
        if self.mode == "timing" and not (self.samplerate_hz and self.samplerate_hz > 0):
            raise UsageError(f"source {self.name!r}: timing mode needs a positive sample rate")
        vectors = vectors_from_names(self.channels)
        known = set(self.channels) | set(vectors)
        for role, target in self.roles.items():
            if target not in known:
                raise UsageError(f"source {self.name!r}: role {role!r} names unknown channel {target!r}")


def _channel_names(owner: str, value: Any) -> list[str]:
    """The ``channels`` attribute: a non-empty 1-D array of distinct names (at most limits.MAX_CHANNELS)."""
    if not isinstance(value, np.ndarray) or value.ndim != 1 or not value.size:
        raise FormatError(f"{owner}: attribute 'channels' is not a list of channel names")
    if value.size > limits.MAX_CHANNELS:
        raise FormatError(f"{owner}: {value.size:,} channels; a source holds at most {limits.MAX_CHANNELS:,}")
    names = [c.decode("utf-8", "replace") if isinstance(c, bytes) else c for c in value.tolist()]
    if not all(isinstance(c, str) and c for c in names):
        raise FormatError(f"{owner}: attribute 'channels' holds other than channel names")
    if len(set(names)) != len(names):
        raise FormatError(f"{owner}: attribute 'channels' names a channel twice")
    return names


class Source:
    """One source of an open capture set; reads are lazy (only the chunks asked for).

    Its attributes are checked once, here, against their types and ranges
    (docs/formats.md): a damaged or hand-edited source is a FormatError naming
    the file, the source and the attribute, never a wrong answer later.
    """

    def __init__(self, group: h5py.Group):
        self._g = group
        self.name: str = group.name.rsplit("/", 1)[-1]
        self.path = str(group.file.filename)
        self._owner = owner = f"{self.path}: source {self.name!r}"
        with reading(self.path, f"source {self.name!r}"):
            a = group.attrs
            missing = [k for k in ("mode", "channels", "trigger_sample", "offset_ps") if k not in a]
            if missing:
                raise FormatError(f"{owner} is malformed: no attribute(s) {', '.join(missing)}")
            self.mode: Mode = attr_text(owner, a, "mode")  # type: ignore[assignment]
            self.channels: list[str] = _channel_names(owner, a["channels"])
            self.trigger_sample = attr_int(owner, a, "trigger_sample", 0, limits.MAX_TIME_PS)
            self.offset_ps = attr_int(owner, a, "offset_ps", -limits.MAX_TIME_PS, limits.MAX_TIME_PS)
            self.samplerate_hz: float | None = attr_real(owner, a, "samplerate_hz", limits.MIN_SAMPLE_RATE_HZ,
                                                         limits.MAX_SAMPLE_RATE_HZ)
            self.roles: dict[str, str] = attr_json(owner, a, "roles", is_mapping_of(str))
            self.vectors: dict[str, list[str]] = attr_json(owner, a, "vectors", is_mapping_of(list))
            self.bus: dict[str, Any] = attr_json(owner, a, "bus", lambda v: isinstance(v, dict))
            self.instrument: dict[str, Any] = attr_json(owner, a, "instrument", lambda v: isinstance(v, dict))
            self.notes = attr_text(owner, a, "notes", "")
            expected = attr_int(owner, a, "samples_expected", 0, limits.MAX_TIME_PS, -1)
            self.samples_expected: int | None = None if expected < 0 else expected
            samples = group.get("samples")
            if samples is None:
                raise FormatError(f"{owner} is malformed: no 'samples' dataset")
            if not isinstance(samples, h5py.Dataset):
                raise FormatError(f"{owner} is malformed: 'samples' is not a dataset")
            self._samples: h5py.Dataset = samples
            self._timestamps: h5py.Dataset | None = group.get("timestamps_ps")
        self._index = {c: i for i, c in enumerate(self.channels)}
        strays = sorted({c for bits in self.vectors.values() for c in bits if c not in self._index})
        if strays:
            raise FormatError(f"{owner}: its vectors name channels it does not have: {', '.join(map(str, strays[:5]))}")
        try:
            derived = vectors_from_names(self.channels)
        except UsageError as exc:
            raise FormatError(f"{owner}: its channels' names: {exc}") from None
        if self.vectors != derived:  # docs/formats.md: derived from `channels`, every bit present
            raise FormatError(f"{owner}: attribute 'vectors' is not what its channels' names make "
                              f"({', '.join(sorted(set(self.vectors) ^ set(derived))[:5]) or 'their bits differ'})")
        unknown = sorted(f"{role}={target}" for role, target in self.roles.items()
                         if target not in self._index and target not in self.vectors)
        if unknown:
            raise FormatError(f"{owner}: its roles name channels it does not have: {', '.join(unknown[:5])}")
        self._check()

    def _read(self, ds: h5py.Dataset, selection: Any, what: str) -> np.ndarray:
        """``ds[selection]``; damage (a failed checksum, broken metadata) becomes a FormatError naming the rows.

        A span of rows is read by whole stored chunks with nicrig's own codecs (:func:`nicrig.chunked.read_rows`:
        the same rows, read faster and without the GIL)."""
        with reading(self.path, f"source {self.name!r} {what}"):
            if isinstance(selection, slice) and selection.step is None:
                return read_rows(ds, selection.start or 0, ds.shape[0] if selection.stop is None else selection.stop)
            return ds[selection]

    def _check(self) -> None:
        unit = unitsize_for(len(self.channels))
        shape = self._samples.shape
        if self._timestamps is not None and (not isinstance(self._timestamps, h5py.Dataset)
                                             or self._timestamps.dtype.kind != "i"):
            raise FormatError(f"{self._owner}: timestamps_ps is not an integer dataset")
        if len(shape) != 2 or shape[1] != unit or self._samples.dtype != np.uint8:
            raise FormatError(
                f"{self._owner}: samples must be uint8 (N, {unit}) for {len(self.channels)} channels, "
                f"found {self._samples.dtype} {shape}"
            )
        if self.mode == "state":
            if self._timestamps is None:
                raise FormatError(f"{self._owner}: state mode without timestamps_ps")
            if self._timestamps.shape != (shape[0],):
                raise FormatError(
                    f"{self._owner}: {self._timestamps.size} timestamps for {shape[0]} samples"
                )
        elif self.mode == "timing":
            if not self.samplerate_hz or self.samplerate_hz <= 0:
                raise FormatError(f"{self._owner}: timing mode without a positive samplerate_hz")
        else:
            raise FormatError(f"{self._owner}: unknown mode {self.mode!r}")
        check_stored(self.path, f"source {self.name!r} samples", self._samples)
        if self._timestamps is not None:
            check_stored(self.path, f"source {self.name!r} timestamps_ps", self._timestamps)
        self._check_timeline()

    def _local_at(self, i: int) -> int:
        """Local time (ps) of sample ``i`` as :meth:`_local_ps` computes it, exactly, as a Python int; a
        FormatError when it is beyond a signed 64-bit time (timing mode: ``i`` times the period)."""
        if self.mode == "state":
            return int(self._local_ps(i, i + 1)[0])
        t = float(np.rint(i * (1e12 / self.samplerate_hz)))  # type: ignore[operator]
        if not abs(t) < 2.0**63:
            raise FormatError(f"{self._owner}: sample {i:,} is at {t:.3g} ps on its own time base, beyond the "
                              f"{limits.MAX_TIME_PS:.3g} ps a time can hold (samplerate_hz {self.samplerate_hz:g})")
        return int(t)

    def _check_timeline(self) -> None:
        """Every time the readers compute for this source fits a signed 64-bit integer (ps).

        Times are ``local(i) - local(trigger) + offset_ps`` in int64 arithmetic, which wraps silently: an
        ``offset_ps`` near 2**63 gave events at -9.2e15 ns. With timestamps in order (checked as they are
        read), the first and last samples bound every time between them, so checking theirs, the trigger's
        and the differences, exactly, at open, covers every later computation.
        """
        n = self.num_samples
        if not n:
            return
        first, last = self._local_at(0), self._local_at(n - 1)
        if last < first:
            raise FormatError(f"{self._owner}: timestamps_ps decrease: the last sample's ({last}) is before the "
                              f"first's ({first}); they never decrease")
        trigger = self._local_at(min(self.trigger_sample, n - 1) if self.mode == "state" else self.trigger_sample)
        for what, value in (("its duration", last - first), ("the first sample's time", first - trigger),
                            ("the last sample's time", last - trigger),
                            ("the first sample's time with offset_ps", first - trigger + self.offset_ps),
                            ("the last sample's time with offset_ps", last - trigger + self.offset_ps),
                            ("offset_ps less the trigger's time", self.offset_ps - trigger)):
            if not -limits.MAX_TIME_PS <= value <= limits.MAX_TIME_PS:
                raise FormatError(f"{self._owner}: {what} on the common timeline is {value:,} ps, beyond the "
                                  f"±{limits.MAX_TIME_PS:,} ps a time can hold (trigger_sample "
                                  f"{self.trigger_sample:,}, offset_ps {self.offset_ps:,})")

    def _timestamps_read(self, start: int, stop: int) -> np.ndarray:
        """Timestamps ``[start, stop)``, checked never to decrease (docs/formats.md): a decrease is damage."""
        assert self._timestamps is not None
        # a fresh array from the read: no copy when the dataset is int64, as nicrig writes it
        ts = np.asarray(self._read(self._timestamps, np.s_[start:stop], f"timestamps {start}..{stop}"),
                        dtype=np.int64)
        if _decreases(ts):
            k = int(np.argmax(ts[1:] < ts[:-1]))
            raise FormatError(f"{self._owner}: timestamps_ps decrease at sample {start + k + 1:,} "
                              f"({int(ts[k + 1])} after {int(ts[k])}); they never decrease: damaged file")
        return ts

    def refresh(self) -> None:
        """Re-read the datasets' sizes (a reader of a file being written in SWMR mode)."""
        self._samples.refresh()
        if self._timestamps is not None:
            self._timestamps.refresh()

    # -- geometry ---------------------------------------------------------------------------
    @property
    def num_samples(self) -> int:
        return int(self._samples.shape[0])

    @property
    def unitsize(self) -> int:
        return int(self._samples.shape[1])

    def __len__(self) -> int:
        return self.num_samples

    @property
    def datasets(self) -> tuple[h5py.Dataset, h5py.Dataset | None]:
        """The samples and (state mode) timestamps datasets, for readers that take their stored chunks."""
        return self._samples, self._timestamps

    @property
    def short(self) -> bool:
        """Whether the source holds fewer samples than its instrument announced (:attr:`samples_expected`): an
        acquisition killed or cut short keeps what was flushed, and says so here."""
        return self.samples_expected is not None and self.num_samples < self.samples_expected

    def short_text(self) -> str:
        """What a reader says of a short source ("" when it is not)."""
        if not self.short:
            return ""
        return (f"source {self.name!r} holds {self.num_samples:,} of the {self.samples_expected:,} samples its "
                "instrument announced: a short recording (the acquisition was killed or cut short)")

    def channel_index(self, name: str) -> int:
        """Bit position of channel ``name`` in a packed sample."""
        try:
            return self._index[name]
        except KeyError:
            raise UsageError(f"source {self.name!r} has no channel {name!r}") from None

    def vector_bits(self, name: str) -> list[int]:
        """Bit positions of vector ``name`` (e.g. ``AD``), LSB first."""
        if name not in self.vectors:
            raise UsageError(f"source {self.name!r} has no vector {name!r} (vectors: {sorted(self.vectors)})")
        return [self._index[c] for c in self.vectors[name]]

    def role(self, role: str) -> str | None:
        """The channel or vector playing ``role`` (``frame``, ``ad``, ``rx_dv``...), or None."""
        return self.roles.get(role)

    # -- samples ----------------------------------------------------------------------------
    def _span(self, start: int | None, stop: int | None) -> tuple[int, int]:
        n = self.num_samples
        s = 0 if start is None else max(0, min(int(start), n))
        e = n if stop is None else max(s, min(int(stop), n))
        return s, e

    def read_packed(self, start: int | None = None, stop: int | None = None) -> np.ndarray:
        """Packed samples ``[start, stop)`` as ``(n, unitsize)`` uint8, read lazily."""
        s, e = self._span(start, stop)
        return self._read(self._samples, np.s_[s:e], f"samples {s}..{e}")

    def iter_packed(self, start: int | None = None, stop: int | None = None,
                    block: int = 1 << 20) -> Iterator[tuple[int, np.ndarray]]:
        """Yield ``(first_sample, packed_block)`` over ``[start, stop)`` a block at a time."""
        s, e = self._span(start, stop)
        for b in range(s, e, block):
            yield b, self._read(self._samples, np.s_[b:min(b + block, e)], f"samples {b}..{min(b + block, e)}")

    def read_channel(self, name: str, start: int | None = None, stop: int | None = None) -> np.ndarray:
        """One channel's values ``[start, stop)`` as a uint8 array of 0/1."""
        bit = self.channel_index(name)
        s, e = self._span(start, stop)
        col = self._read(self._samples, np.s_[s:e, bit // 8], f"samples {s}..{e}")
        return (col >> (bit % 8)) & 1

    def read_vector(self, name: str, start: int | None = None, stop: int | None = None) -> np.ndarray:
        """Vector ``name`` (``AD``, ``RXD``...) as uint64 values ``[start, stop)``, bit 0 = ``NAME[0]``."""
        bits = self.vector_bits(name)
        if len(bits) > 64:
            raise UsageError(f"vector {name!r} has {len(bits)} bits: read_vector returns 64-bit values; "
                             "read its channels or a narrower vector")
        packed = self.read_packed(start, stop)
        out = np.zeros(packed.shape[0], dtype=np.uint64)
        for weight, bit in enumerate(bits):
            out |= ((packed[:, bit // 8] >> (bit % 8)) & 1).astype(np.uint64) << np.uint64(weight)
        return out

    # -- time -------------------------------------------------------------------------------
    def _local_ps(self, start: int, stop: int) -> np.ndarray:
        if self.mode == "state":
            return self._timestamps_read(start, stop)
        idx = np.arange(start, stop, dtype=np.float64)
        return np.rint(idx * (1e12 / self.samplerate_hz)).astype(np.int64)  # type: ignore[operator]

    def _trigger_local_ps(self) -> int:
        if self.num_samples == 0:
            return 0
        # timing: the same float expression as _local_ps, so times_ps(trigger) is exactly offset_ps
        t = min(self.trigger_sample, self.num_samples - 1) if self.mode == "state" else self.trigger_sample
        return int(self._local_ps(t, t + 1)[0])

    def times_ps(self, start: int | None = None, stop: int | None = None) -> np.ndarray:
        """Times of samples ``[start, stop)`` on the set's common timeline (ps, zero at the trigger)."""
        s, e = self._span(start, stop)
        out = self._local_ps(s, e)
        out += self.offset_ps - self._trigger_local_ps()  # in place: one pass over a block of a deep capture
        return out

    def times_at(self, indices: np.ndarray, block: int = 1 << 20) -> np.ndarray:
        """Common-timeline times (ps) of arbitrary sample ``indices``.

        State mode reads only the stretches of timestamps between wanted
        indices (at most ``block`` at a time, each starting at a wanted index),
        so times for a decoded table of a deep capture cost little memory, and
        the table of a span of the source reads no timestamps outside it.
        """
        idx = np.asarray(indices, dtype=np.int64)
        if idx.size and (idx.min() < 0 or idx.max() >= max(self.num_samples, 1)):
            raise UsageError(f"source {self.name!r}: sample index outside 0..{self.num_samples - 1}")
        base = self.offset_ps - self._trigger_local_ps()
        if self.mode == "timing":
            return np.rint(idx * (1e12 / self.samplerate_hz)).astype(np.int64) + base  # type: ignore[operator]
        assert self._timestamps is not None
        out = np.empty(idx.size, dtype=np.int64)
        order = np.argsort(idx, kind="stable")
        sorted_idx = idx[order]
        i = 0
        while i < sorted_idx.size:
            first = int(sorted_idx[i])
            j = int(np.searchsorted(sorted_idx, first + block))
            last = int(sorted_idx[j - 1]) + 1
            chunk = self._timestamps_read(first, last)
            out[order[i:j]] = chunk[sorted_idx[i:j] - first]
            i = j
        return out + base

    def sample_at(self, t_ps: int) -> int:
        """Index of the first sample at or after common-timeline time ``t_ps`` (may be ``num_samples``).

        State mode bisects the timestamp dataset with single-element reads, so a
        window of a 100 M-sample source is found without loading its timestamps.
        """
        local = int(t_ps) - self.offset_ps + self._trigger_local_ps()
        if self.mode == "timing":
            idx = math.ceil(local * self.samplerate_hz / 1e12 - 1e-9)  # type: ignore[operator]
            idx = max(0, min(idx, self.num_samples))
            # sample times are rounded to whole ps: settle the estimate on them, so that
            # sample_at(times_ps(i)) == i for every rate (3 GHz, 66.67 MHz ...)
            while idx > 0 and int(self._local_ps(idx - 1, idx)[0]) >= local:
                idx -= 1
            while idx < self.num_samples and int(self._local_ps(idx, idx + 1)[0]) < local:
                idx += 1
            return idx
        assert self._timestamps is not None
        lo, hi = 0, self.num_samples
        while lo < hi:
            mid = (lo + hi) // 2
            if int(self._read(self._timestamps, mid, f"timestamp {mid}")) < local:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def window(self, t0_ps: int, t1_ps: int) -> tuple[int, int]:
        """Sample range ``[start, stop)`` covering common-timeline times ``[t0_ps, t1_ps)``."""
        return self.sample_at(t0_ps), self.sample_at(t1_ps)

    @property
    def duration_ps(self) -> int:
        if self.num_samples == 0:
            return 0
        first, last = self.times_ps(0, 1)[0], self.times_ps(self.num_samples - 1, self.num_samples)[0]
        return int(last - first)

    def describe(self) -> dict[str, Any]:
        """A JSON-ready summary (``nicrig info``)."""
        return {
            "name": self.name,
            "mode": self.mode,
            "samplerate_hz": self.samplerate_hz,
            "num_samples": self.num_samples,
            "num_channels": len(self.channels),
            "unitsize": self.unitsize,
            "trigger_sample": self.trigger_sample,
            "offset_ps": self.offset_ps,
            "duration_ps": self.duration_ps,
            "channels": self.channels,
            "vectors": {k: len(v) for k, v in self.vectors.items()},
            "roles": self.roles,
            "bus": self.bus,
            "instrument": self.instrument,
            "notes": self.notes,
            "samples_expected": self.samples_expected,
            "short": self.short,
        }


@dataclass(frozen=True)
class EncodedBlock:
    """A block of a source's samples (and timestamps) encoded for the source's HDF5 filters, chunk by chunk
    (:func:`encode_block`), for :meth:`SourceWriter.append_encoded`. Picklable: made in a thread or another
    process, stored by the writer's.

    ``sample_chunks`` and ``timestamp_chunks`` (None in timing mode) hold one encoded chunk per
    ``chunk_samples`` samples, the last one an edge chunk when ``num_samples`` is not a multiple;
    ``first_ps`` and ``last_ps`` are the block's first and last timestamps, for the writer's order check (None:
    no timestamps, or none).
    """

    num_samples: int
    unitsize: int
    chunk_samples: int
    sample_chunks: tuple[bytes, ...]
    timestamp_chunks: tuple[bytes, ...] | None
    first_ps: int | None = None
    last_ps: int | None = None


def encode_block(samples: np.ndarray, timestamps: np.ndarray | None, chunk_samples: int, *,
                 executor: Executor | None = None) -> EncodedBlock:
    """``(n, unitsize)`` uint8 packed samples and, in state mode, their ``n`` non-decreasing local timestamps (ps),
    encoded as a source of a capture set stores them (shuffle, gzip level 1 and Fletcher32 on chunks of
    ``chunk_samples`` samples, :data:`nicrig.h5file.STORAGE`; deflated by ISA-L, :func:`nicrig.h5file.encode_chunk`).

    No HDF5 call: it runs in any thread or process. ``executor`` encodes the chunks concurrently (ISA-L and the
    checksum release the GIL); without one they are encoded here, one after another.
    """
    samples = np.asarray(samples)
    if samples.dtype != np.uint8 or samples.ndim != 2 or samples.shape[1] < 1:
        raise UsageError(f"encode_block needs (n, unitsize) uint8 samples, got {samples.dtype} {samples.shape}")
    if chunk_samples < 1:
        raise UsageError(f"encode_block: chunk_samples must be positive, not {chunk_samples}")
    ts = None
    if timestamps is not None:
        ts = np.asarray(timestamps, dtype=np.int64)
        if ts.shape != (len(samples),):
            raise UsageError(f"encode_block: {ts.size} timestamps for {len(samples)} samples")
        if _decreases(ts):
            raise UsageError("encode_block: timestamps must not decrease")
    return _encoded(samples, ts, chunk_samples, executor)


def _decreases(ts: np.ndarray) -> bool:
    """Whether some timestamp is smaller than the one before it."""
    return bool(np.any(ts[1:] < ts[:-1]))


def _encoded(samples: np.ndarray, ts: np.ndarray | None, chunk_samples: int, executor: Executor | None) -> EncodedBlock:
    """:func:`encode_block` of checked arguments (uint8 samples, int64 timestamps in order or None)."""
    starts = range(0, len(samples), chunk_samples)
    jobs = [(samples[c:c + chunk_samples], storage_filters(1)) for c in starts]
    if ts is not None:
        jobs += [(ts[c:c + chunk_samples], storage_filters(ts.dtype.itemsize)) for c in starts]
    encoded = tuple((executor.map if executor is not None else map)(
        lambda job: encode_chunk(job[0], chunk_samples, job[1]), jobs))
    k = len(starts)
    stamped = ts is not None and len(ts) > 0
    return EncodedBlock(len(samples), samples.shape[1], chunk_samples, encoded[:k], None if ts is None else encoded[k:],
                        int(ts[0]) if stamped else None, int(ts[-1]) if stamped else None)


class SourceWriter(Source):
    """A source being written: appends packed samples (and timestamps in state mode) in streaming fashion."""

    #: The last timestamp stored (ps), once known here: each append's first must not be smaller, and reading it
    #: back from the file inflates a whole chunk. None: read it back when needed.
    _last_ps: int | None = None

    def append(self, packed: np.ndarray, timestamps_ps: np.ndarray | None = None) -> None:
        """Append ``(n, unitsize)`` uint8 packed samples; state mode needs their local timestamps (ps).

        From the first chunk boundary on, the samples' chunks are encoded on :data:`nicrig.h5file.ENCODER_THREADS` threads
        and stored whole (:meth:`append_encoded`); samples before it (an append that starts mid-chunk) are
        written through HDF5's own filters, and so is everything appended to datasets of other filters (a file
        of an older nicrig).
        """
        packed = np.asarray(packed, dtype=np.uint8)
        if packed.ndim != 2 or packed.shape[1] != self.unitsize:
            raise UsageError(f"source {self.name!r}: append needs (n, {self.unitsize}) uint8, got {packed.shape}")
        n0, n = self.num_samples, packed.shape[0]
        ts = None
        if self.mode == "state":
            if timestamps_ps is None or len(timestamps_ps) != n:
                raise UsageError(f"source {self.name!r}: state mode needs one timestamp per appended sample")
            ts = np.asarray(timestamps_ps, dtype=np.int64)
            if _decreases(ts):
                raise UsageError(f"source {self.name!r}: timestamps must not decrease")
            if n:
                self._check_follows(int(ts[0]))
                self._last_ps = None  # until this append is stored
        elif timestamps_ps is not None:
            raise UsageError(f"source {self.name!r}: timing mode takes no timestamps")
        chunk = self._direct_chunk_samples
        head = n if chunk is None else min(n, -n0 % chunk)
        if head:
            if ts is not None:
                assert self._timestamps is not None
                self._timestamps.resize((n0 + head,))
                self._timestamps[n0:] = ts[:head]
            self._samples.resize((n0 + head, self.unitsize))
            self._samples[n0:] = packed[:head]
        if n > head:
            assert chunk is not None
            self._store(_encoded(packed[head:], None if ts is None else ts[head:], chunk, encoder_pool()))
        self._flush()
        if ts is not None and n:
            self._last_ps = int(ts[-1])

    def append_encoded(self, block: EncodedBlock) -> None:
        """Append a block :func:`encode_block` made, storing its chunks as they are (``H5Dwrite_chunk``).

        The block must start on a chunk boundary: only the last block of a source may end mid-chunk (an
        edge chunk), and what follows it goes through :meth:`append`.
        """
        chunk = self._direct_chunk_samples
        if chunk is None:
            raise UsageError(f"source {self.name!r}: its datasets are not stored as nicrig stores them now "
                             f"({dataset_filters(self._samples)}): append samples with append()")
        if block.unitsize != self.unitsize or block.chunk_samples != chunk:
            raise UsageError(f"source {self.name!r}: a block of {block.unitsize}-byte samples in chunks of "
                             f"{block.chunk_samples}; the source has {self.unitsize}-byte samples in chunks of {chunk}")
        if (block.timestamp_chunks is not None) != (self.mode == "state"):
            raise UsageError(f"source {self.name!r}: {self.mode} mode takes "
                             f"{'a block with' if self.mode == 'state' else 'no'} timestamps")
        if self.num_samples % chunk:
            raise UsageError(f"source {self.name!r}: an encoded block must start on a chunk boundary; the source "
                             f"holds {self.num_samples} samples, {self.num_samples % chunk} into a chunk of {chunk} "
                             "(only a source's last block may end mid-chunk)")
        if block.first_ps is not None:
            self._check_follows(block.first_ps)
        self._last_ps = None  # until the block is stored
        self._store(block)
        self._flush()
        self._last_ps = block.last_ps

    @functools.cached_property
    def _direct_chunk_samples(self) -> int | None:
        """Samples per chunk when this source's datasets take chunks :func:`encode_block` makes (their filters,
        read from HDF5, those it encodes with, fill value 0, chunked along samples only); else None (a file of an
        older nicrig, with other filters)."""
        chunks, ts = self._samples.chunks, self._timestamps
        if chunks is None or self._samples.dtype != np.uint8 or not takes_encoded_chunks(self._samples):
            return None
        if ts is not None and (ts.chunks != chunks[:1] or ts.dtype != np.int64 or not takes_encoded_chunks(ts)):
            return None
        return int(chunks[0])

    def _check_follows(self, first_ps: int) -> None:
        """Appended timestamps start at or after the last stored one."""
        n0 = self.num_samples
        assert self._timestamps is not None
        if not n0:
            return
        if self._last_ps is None:
            self._last_ps = int(self._read(self._timestamps, n0 - 1, f"timestamp {n0 - 1}"))
        if first_ps < self._last_ps:
            raise UsageError(f"source {self.name!r}: timestamps must not decrease")

    def _store(self, block: EncodedBlock) -> None:
        """Grow the datasets by ``block`` and store its chunks (the source ends on a chunk boundary)."""
        n0, chunk = self.num_samples, block.chunk_samples
        if self._timestamps is not None:
            assert block.timestamp_chunks is not None
            self._timestamps.resize((n0 + block.num_samples,))
            for i, data in enumerate(block.timestamp_chunks):
                self._timestamps.id.write_direct_chunk((n0 + i * chunk,), data)
        self._samples.resize((n0 + block.num_samples, self.unitsize))
        for i, data in enumerate(block.sample_chunks):
            self._samples.id.write_direct_chunk((n0 + i * chunk, 0), data)

    def _flush(self) -> None:
        if self._g.file.swmr_mode:  # readers following the file see each block as it lands
            if self._timestamps is not None:
                self._timestamps.flush()
            self._samples.flush()

    def set_trigger(self, sample: int) -> None:
        self.trigger_sample = int(sample)
        self._g.attrs["trigger_sample"] = np.int64(sample)

    def set_offset(self, offset_ps: int) -> None:
        self.offset_ps = int(offset_ps)
        self._g.attrs["offset_ps"] = np.int64(offset_ps)

    def set_notes(self, notes: str) -> None:
        """Replace the free-form notes (an importer knows what to say only after streaming)."""
        self.notes = notes
        self._g.attrs["notes"] = notes

    def set_instrument(self, instrument: Mapping[str, Any]) -> None:
        self.instrument = dict(instrument)
        self._g.attrs["instrument"] = to_json(self.instrument)


class CaptureSet(NicrigFile):
    """An open capture-set file: named sources of logic samples, and tables (see :class:`NicrigFile`)."""

    FORMAT_NAME = FORMAT_NAME
    FORMAT_VERSION = FORMAT_VERSION
    NOT_TABLES = ("sources",)
    COMPANION = True

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._sources: dict[str, Source] = {}

    def _init_layout(self) -> None:
        self._h5.create_group("sources")

    def _validate(self) -> None:
        if not isinstance(self._h5.get("sources"), h5py.Group):
            raise FormatError(f"{self.path}: a capture set without a 'sources' group")
        for name in self.source_names:
            self.source(name)

    def check(self) -> None:
        """Every table (:meth:`NicrigFile.check`), and the udpmon results a simulated set carries, as a results
        file is checked (the sources were checked when the set was opened)."""
        from nicrig.udpmon.results import RESULTS_GROUP, ResultsFile

        super().check()
        if self.has_nested(RESULTS_GROUP):
            self.nested(ResultsFile, RESULTS_GROUP).check()

    # -- sources ----------------------------------------------------------------------------
    @property
    def source_names(self) -> list[str]:
        with reading(self.path, "its list of sources"):
            return list(self._h5["sources"].keys())

    def source(self, name: str) -> Source:
        """Source ``name``, checked. A file open read-only and not followed as it grows (SWMR) cannot change under
        its reader, so each of its sources is made and checked once, when the file is validated, and that one is
        handed out from then on (checking reads stored chunks); a writer's are made anew from what the file holds."""
        if name in self._sources:
            return self._sources[name]
        with reading(self.path, f"source {name!r}"):
            grp = self._h5["sources"].get(name)
            listed = grp is not None or name in self._h5["sources"]
        if listed and not isinstance(grp, h5py.Group):
            raise FormatError(f"{self.path}: source {name!r} is listed but is no group: damaged file; nicrig verify "
                              f"{self.path} says where")
        if not isinstance(grp, h5py.Group):
            raise UsageError(f"{self.path}: no source {name!r} (sources: {', '.join(self.source_names) or 'none'})")
        src = Source(grp)
        h5 = self._h5.file
        if h5.mode == "r" and not h5.swmr_mode:
            self._sources[name] = src
        return src

    @property
    def sources(self) -> dict[str, Source]:
        return {n: self.source(n) for n in self.source_names}

    def add_source(self, spec: SourceSpec, *, chunk_samples: int = DEFAULT_CHUNK_SAMPLES) -> SourceWriter:
        """Create an empty source to :meth:`SourceWriter.append` samples to."""
        spec.validate()
        if spec.name in self._h5["sources"]:
            raise UsageError(f"{self.path}: source {spec.name!r} exists")
        unit = unitsize_for(len(spec.channels))
        g = self._h5["sources"].create_group(spec.name)
        g.attrs["mode"] = spec.mode
        g.attrs["channels"] = np.array(spec.channels, dtype=h5py.string_dtype())
        g.attrs["vectors"] = to_json(vectors_from_names(spec.channels))
        if spec.samplerate_hz:
            g.attrs["samplerate_hz"] = float(spec.samplerate_hz)
        g.attrs["trigger_sample"] = np.int64(spec.trigger_sample)
        g.attrs["offset_ps"] = np.int64(spec.offset_ps)
        g.attrs["roles"] = to_json(spec.roles)
        g.attrs["bus"] = to_json(spec.bus)
        g.attrs["instrument"] = to_json(spec.instrument)
        g.attrs["notes"] = spec.notes
        if spec.samples_expected is not None:
            g.attrs["samples_expected"] = np.int64(spec.samples_expected)
        g.create_dataset("samples", shape=(0, unit), maxshape=(None, unit), dtype=np.uint8,
                         chunks=(chunk_samples, unit), **STORAGE)
        if spec.mode == "state":
            g.create_dataset("timestamps_ps", shape=(0,), maxshape=(None,), dtype=np.int64,
                             chunks=(chunk_samples,), **STORAGE)
        return SourceWriter(g)

    def writer(self, name: str) -> SourceWriter:
        """Reopen an existing source for appending (file opened ``r+`` or being created)."""
        self.source(name)
        return SourceWriter(self._h5["sources"][name])
