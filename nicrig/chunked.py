"""Datasets read and written a stored chunk at a time, with nicrig's own codecs beside HDF5's.

nicrig stores every dataset chunked, shuffled, deflated and checksummed
(:data:`nicrig.h5file.STORAGE`). Reading such a chunk through HDF5 runs zlib's
inflate while holding Python's GIL; :func:`read_rows` reads the stored chunks
(``H5Dread_chunk``) and undoes the filters itself: the checksum
(Fletcher-32, as HDF5 computes it), zlib-ng's inflate (the same RFC 1950
streams, two to seven times faster than zlib's on nicrig's chunks) and the
shuffle, each without the GIL, so that a thread reading the next block runs
beside one decoding the last. Whatever it does not know (other filters, a
chunk that is not stored, a checksum or stream that does not check) it leaves
to HDF5, which reads those rows as it always does, damage reported as
HDF5 reports it.

:class:`Appender` is the other direction: a table written in order, its
full chunks encoded on the encoder threads (:func:`nicrig.h5file.encode_chunk`)
while more rows come, so a table of any length is written holding only a few
chunks in memory.
"""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Mapping
from concurrent.futures import Future
from typing import Any

import h5py
import imagecodecs
import numpy as np
from h5py import h5z
from imagecodecs import h5checksum_fletcher32

from nicrig.h5file import (
    ENCODER_THREADS,
    STORAGE,
    Filters,
    dataset_filters,
    encode_chunk,
    encoder_pool,
    takes_encoded_chunks,
)

_INFLATE = imagecodecs.zlibng_decode if imagecodecs.ZLIBNG.available else imagecodecs.zlib_decode
_KNOWN = {h5z.FILTER_SHUFFLE, h5z.FILTER_DEFLATE, h5z.FILTER_FLETCHER32}


class _NotDecoded(Exception):
    """A stored chunk this module leaves to HDF5 (HDF5 reads it, or says what is wrong with it)."""


#: The filters :func:`read_rows` undoes, in the order HDF5 applies them when writing (nicrig's order).
_ORDER = (h5z.FILTER_SHUFFLE, h5z.FILTER_DEFLATE, h5z.FILTER_FLETCHER32)


def _decodable(ds: h5py.Dataset) -> Filters | None:
    """``ds``'s filters when :func:`read_rows` decodes its chunks itself (chunked along its first axis only,
    elements whose bytes in memory are those in the file, and filters among shuffle, deflate and Fletcher-32 in
    HDF5's order), else None."""
    if ds.chunks is None or ds.ndim < 1 or tuple(ds.chunks[1:]) != tuple(ds.shape[1:]) or ds.dtype.hasobject:
        return None
    filters = dataset_filters(ds)
    codes = [code for code, _ in filters]
    if not all(c in _ORDER for c in codes) or codes != sorted(set(codes), key=_ORDER.index):
        return None
    return filters


def _unshuffle(data: Any, size: int, target: np.ndarray) -> None:
    """HDF5's shuffle filter undone (``size``-byte elements stored as byte planes) from ``data`` into ``target``."""
    planes = np.frombuffer(data, np.uint8)
    if size in (2, 4, 8):
        imagecodecs.byteshuffle_decode(planes.view(f"<u{size}"), out=target.view(f"<u{size}"))
    else:
        target.reshape(-1, size)[:] = planes.reshape(size, -1).T


def _decode(ds: h5py.Dataset, filters: Filters, first: int, out: np.ndarray) -> None:
    """The chunk of ``ds`` (whose filters are ``filters``) starting at row ``first``, decoded into ``out`` (the
    whole chunk's rows, contiguous)."""
    try:
        mask, stored = ds.id.read_direct_chunk((first,) + (0,) * (ds.ndim - 1))
    except (OSError, RuntimeError, KeyError, ValueError):  # not stored (never written): HDF5 reads it as fill
        raise _NotDecoded from None
    target = out.reshape(-1).view(np.uint8)
    steps = [(code, values) for i, (code, values) in enumerate(filters) if not mask & (1 << i)]
    data: Any = memoryview(stored)
    for code, values in reversed(steps):  # Fletcher-32, then inflate, then unshuffle
        if code == h5z.FILTER_FLETCHER32:
            if len(data) < 4 or struct.unpack("<I", data[-4:])[0] != h5checksum_fletcher32(data[:-4]):
                raise _NotDecoded
            data = data[:-4]
        elif code == h5z.FILTER_DEFLATE:
            last = steps[0][0] != h5z.FILTER_SHUFFLE
            try:
                # Straight into the rows when no shuffle is left to undo: no copy.
                data = _INFLATE(data, out=target if last else target.nbytes)
            except Exception:  # noqa: BLE001 - the codec's own error class; HDF5 says what is wrong
                raise _NotDecoded from None
            if len(data) != target.nbytes:
                raise _NotDecoded
            if last:
                return
        else:
            size = values[0] if values else ds.dtype.itemsize
            if len(data) != target.nbytes:
                raise _NotDecoded
            if size > 1:
                if target.nbytes % size:
                    raise _NotDecoded
                _unshuffle(data, size, target)
                return
    if len(data) != target.nbytes:
        raise _NotDecoded
    target[:] = np.frombuffer(data, np.uint8)


def read_rows(ds: h5py.Dataset, start: int, stop: int) -> np.ndarray:
    """Rows ``[start, stop)`` of ``ds`` (clipped to it), as ``ds[start:stop]`` gives them.

    Chunks nicrig's codecs decode are decoded here, the others read by HDF5
    (``ds[...]``, whose errors the caller turns into messages as for any read),
    and so is a span shorter than a chunk (a value here and there: HDF5 keeps
    the chunk it read last).
    """
    n = ds.shape[0] if ds.ndim else 0
    start, stop = max(0, min(start, n)), max(0, min(stop, n))
    stop = max(start, stop)
    if ds.chunks is None or stop - start < ds.chunks[0]:
        return ds[start:stop]  # less than a chunk: HDF5's chunk cache may hold it already
    filters = _decodable(ds)
    if filters is None:
        return ds[start:stop]
    rows = ds.chunks[0]
    out = np.empty((stop - start, *ds.shape[1:]), dtype=ds.dtype)
    whole = None
    for first in range(start - start % rows, stop, rows):
        a, b = max(first, start), min(first + rows, stop)
        inside = a == first and b == first + rows
        try:
            if inside:  # a whole chunk: decoded where its rows go
                _decode(ds, filters, first, out[a - start:b - start])
            else:
                if whole is None:
                    whole = np.empty((rows, *ds.shape[1:]), dtype=ds.dtype)
                _decode(ds, filters, first, whole)
                out[a - start:b - start] = whole[a - first:b - first]
        except _NotDecoded:
            out[a - start:b - start] = ds[a:b]
    return out


def check_rows(ds: h5py.Dataset) -> None:
    """Raise as reading ``ds`` through HDF5 would when some of its rows do not read, without inflating a chunk
    whose Fletcher-32 checksum holds (a cheap check of a table about to be copied chunk for chunk).

    HDF5 itself reads what the checksums cannot vouch for: datasets without
    them, chunks not stored, and chunks whose checksum does not hold (HDF5
    also accepts the byte order of checksums written before HDF5 1.6.3).
    """
    n = ds.shape[0] if ds.ndim else 0
    filters = _decodable(ds)
    codes = [code for code, _ in filters or ()]
    if filters is None or h5z.FILTER_FLETCHER32 not in codes:
        step = 64 * ds.chunks[0] if ds.chunks is not None else max(n, 1)
        for first in range(0, max(n, 1), step):  # a block at a time: tables of any length
            ds[first:first + step] if ds.ndim else ds[()]
        return
    bit = 1 << codes.index(h5z.FILTER_FLETCHER32)
    rows = ds.chunks[0]
    for first in range(0, n, rows):
        try:
            mask, stored = ds.id.read_direct_chunk((first,) + (0,) * (ds.ndim - 1))
        except (OSError, RuntimeError, KeyError, ValueError):
            stored, mask = b"", bit
        data = memoryview(stored)
        if mask & bit or len(data) < 4 or struct.unpack("<I", data[-4:])[0] != h5checksum_fletcher32(data[:-4]):
            ds[first:first + rows]


class Appender:
    """A one-dimensional table written in order: ``append(rows)`` as they come, ``close()`` at the end.

    The dataset is created empty and growable with nicrig's storage
    (:data:`~nicrig.h5file.STORAGE`), in chunks of ``chunk_rows`` rows
    (default: about 256 KiB of rows). Each full chunk is encoded on the encoder
    threads and stored whole (``H5Dwrite_chunk``) in order, at most a few
    chunks in flight, so memory holds a few chunks whatever the table's length.
    Rows must be in the dataset's dtype.
    """

    CHUNK_BYTES = 1 << 18

    def __init__(self, grp: h5py.Group, name: str, dtype: np.dtype, *, chunk_rows: int | None = None,
                 attrs: Mapping[str, Any] | None = None) -> None:
        self.dtype = np.dtype(dtype)
        self.rows = chunk_rows or max(1, self.CHUNK_BYTES // max(1, self.dtype.itemsize))
        self.ds = grp.create_dataset(name, shape=(0,), maxshape=(None,), dtype=self.dtype, chunks=(self.rows,),
                                     **STORAGE)
        for k, v in (attrs or {}).items():
            self.ds.attrs[k] = v
        self._direct = takes_encoded_chunks(self.ds)
        self._filters = dataset_filters(self.ds)
        self._held: list[np.ndarray] = []     # rows not yet a full chunk
        self._held_rows = 0
        self._flying: deque[tuple[int, int, Future[bytes]]] = deque()  # (first row, rows, encoded chunk)
        self.length = 0                        # rows given so far

    def append(self, rows: np.ndarray) -> None:
        """Add ``rows`` (the dataset's dtype) after those given before. They are encoded as they are, later, on
        the encoder threads: they must not change until :meth:`close`."""
        if rows.dtype != self.dtype:
            raise TypeError(f"rows of {rows.dtype}, the table is {self.dtype}")
        if not len(rows):
            return
        if self._held_rows:  # the rows held first, made a whole chunk with the first of these
            take = min(self.rows - self._held_rows, len(rows))
            self._held.append(rows[:take])
            self._held_rows += take
            rows = rows[take:]
            if self._held_rows < self.rows:
                return
            self._write(np.concatenate(self._held))
            self._held, self._held_rows = [], 0
        full = len(rows) - len(rows) % self.rows
        for c in range(0, full, self.rows):
            self._write(rows[c:c + self.rows])
        if full < len(rows):
            self._held, self._held_rows = [rows[full:]], len(rows) - full

    def _write(self, chunk: np.ndarray) -> None:
        first = self.length
        self.length += len(chunk)
        if not self._direct:
            self.ds.resize((self.length,))
            self.ds[first:self.length] = chunk
            return
        self._flying.append((first, len(chunk), encoder_pool().submit(encode_chunk, chunk, self.rows, self._filters)))
        while len(self._flying) > 2 * ENCODER_THREADS:
            self._store()

    def _store(self) -> None:
        first, n, encoded = self._flying.popleft()
        stored = encoded.result()
        if self.ds.shape[0] < first + n:
            self.ds.resize((first + n,))
        self.ds.id.write_direct_chunk((first,), stored)

    def close(self) -> h5py.Dataset:
        """Write what is held (the last chunk may be short) and wait for the encoders; the dataset."""
        if self._held_rows:
            last = np.concatenate(self._held) if len(self._held) > 1 else self._held[0]
            self._held, self._held_rows = [], 0
            self._write(last)
        while self._flying:
            self._store()
        if self.ds.shape[0] != self.length:
            self.ds.resize((self.length,))
        return self.ds

    def abandon(self) -> None:
        """Stop: wait for the chunks being encoded (their threads hold the rows) and write nothing more."""
        for _, _, encoded in self._flying:
            encoded.cancel() or encoded.exception()
        self._flying.clear()
        self._held, self._held_rows = [], 0
