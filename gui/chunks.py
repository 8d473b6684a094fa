"""A dataset's stored chunks read directly: inflated and checked here, so that threads can share the work.

nicrig stores every dataset chunked along its first axis through shuffle,
deflate and Fletcher32 (``nicrig.h5file.STORAGE``; ``encode_chunk`` writes
such chunks). HDF5 undoes that pipeline holding h5py's lock and the GIL, one
chunk at a time. Reading a chunk's stored bytes (``read_direct_chunk``) and
undoing the filters here, where zlib-ng's inflate and the checksum release the
GIL, lets two threads keep two cores busy; and a shuffled chunk gives the bytes
of one field (a table's column, every 64th timestamp) without unshuffling
the rest. A dataset stored otherwise, a chunk HDF5 stored with a filter
skipped, or one whose checksum does not match is read through HDF5, which
reads it or reports the damage.

A reader of every chunk (the preparer) has their places in the file listed
once, by one walk of HDF5's index, and reads each by ``os.pread``: asking
HDF5 for a chunk holds h5py's lock and the GIL while it looks the chunk up and
reads it (a tenth of the overview's CPU), so that two threads inflating
chunks waited on each other there.
"""

from __future__ import annotations

import os
import struct

import h5py
import numpy as np
from imagecodecs import ZlibngError, h5checksum_fletcher32, zlibng_decode

from nicrig.errors import FormatError
from nicrig.h5file import reading, takes_encoded_chunks

#: Bytes of the Fletcher32 checksum HDF5 appends to a stored chunk (least significant byte first).
FLETCHER_BYTES = 4


class StoredChunks:
    """Whole chunks of ``ds`` (chunked along axis 0), as rows or as the columns of some fields; ``every``: most of
    them will be read (their places in the file are listed at once)."""

    def __init__(self, ds: h5py.Dataset, path: str, what: str, every: bool = False):
        self.ds, self.path, self.what = ds, path, what
        self.n = int(ds.shape[0])
        self.chunk_rows = int(ds.chunks[0]) if ds.chunks else max(self.n, 1)
        self.direct = ds.chunks is not None and takes_encoded_chunks(ds)
        self.itemsize = int(ds.dtype.itemsize)
        self.row_items = int(np.prod(ds.shape[1:], dtype=np.int64)) if len(ds.shape) > 1 else 1
        # HDF5's own descriptor of the file (the sec2 driver's) is read with pread, which moves no file offset
        self.places = chunk_places(ds, path, what) if every and self.direct and ds.file.driver == "sec2" else {}
        self.fd = int(ds.file.id.get_vfd_handle()) if self.places else -1

    def __len__(self) -> int:
        """Number of chunks."""
        return -(-self.n // self.chunk_rows)

    def span(self, k: int) -> tuple[int, int]:
        """Rows ``[start, stop)`` of chunk ``k``."""
        return k * self.chunk_rows, min((k + 1) * self.chunk_rows, self.n)

    def _inflated(self, k: int, out: np.ndarray | None = None) -> np.ndarray | None:
        """Chunk ``k``'s bytes as the filters left them (shuffled planes), into ``out`` when given, or None to
        read it through HDF5."""
        mask, stored = self._stored(k)
        if mask != 0 or len(stored) < FLETCHER_BYTES:
            return None
        body = memoryview(stored)[:-FLETCHER_BYTES]
        if struct.unpack("<I", stored[-FLETCHER_BYTES:])[0] != h5checksum_fletcher32(body):
            return None
        size = self.chunk_rows * self.row_items * self.itemsize
        try:
            # zlib-ng inflates a chunk of regular timestamps (a few hundred bytes a kilobyte) five times as fast
            # as ISA-L, which nicrig deflates with
            data = zlibng_decode(body, out=size if out is None else out)
        except ZlibngError:
            return None
        return np.frombuffer(data, np.uint8) if len(data) == size else None

    def _stored(self, k: int) -> tuple[int, bytes]:
        """Chunk ``k``'s filter mask and bytes as stored: read where :func:`chunk_places` found it (a short read
        and a misplaced chunk, whose checksum fails, are read again through HDF5), else asked of HDF5."""
        start, _ = self.span(k)
        place = self.places.get(start)
        if place is not None:
            mask, offset, size = place
            try:
                stored = os.pread(self.fd, size, offset)
                if len(stored) == size:
                    return mask, stored
            except OSError:
                pass
        with reading(self.path, f"{self.what} rows {start}.."):
            return self.ds.id.read_direct_chunk((start,) + (0,) * (len(self.ds.shape) - 1))

    def _hdf5(self, k: int) -> np.ndarray:
        start, stop = self.span(k)
        with reading(self.path, f"{self.what} rows {start}..{stop}"):
            return self.ds[start:stop]

    def rows(self, k: int) -> np.ndarray:
        """Chunk ``k``'s rows (a dataset of one-byte elements, which shuffling leaves as they are, or any other
        through its planes)."""
        start, stop = self.span(k)
        raw = self._inflated(k) if self.direct else None
        if raw is None:
            return self._hdf5(k)
        shape = (self.chunk_rows, *self.ds.shape[1:])
        if self.itemsize > 1:
            raw = np.ascontiguousarray(raw.reshape(self.itemsize, -1).T)
        return raw.view(self.ds.dtype).reshape(shape)[:stop - start]

    def fields_of(self, ks: range, names: list[str]) -> dict[str, np.ndarray]:
        """Columns ``names`` of the consecutive chunks ``ks`` of a table, joined: each chunk inflated into one
        buffer and each column gathered from all their planes at once (a chunk of a table holds a few hundred rows:
        NumPy's calls per chunk and column cost more than the inflating, and hold the interpreter)."""
        def chunk_by_chunk() -> dict[str, np.ndarray]:
            parts = [self.fields(k, names) for k in ks]
            return {n: np.concatenate([p[n] for p in parts]) for n in names}

        if not (self.direct and self.row_items == 1 and len(ks)):
            return chunk_by_chunk()
        buf = np.empty((len(ks), self.chunk_rows * self.itemsize), np.uint8)
        for i, k in enumerate(ks):
            if self._inflated(k, buf[i]) is None:  # stored otherwise or damaged: HDF5 reads it or says why
                return chunk_by_chunk()
        planes = buf.reshape(len(ks), self.itemsize, self.chunk_rows)
        rows = self.span(ks[-1])[1] - self.span(ks[0])[0]
        out = {}
        for n in names:
            dtype, offset = (self.ds.dtype, 0) if not n else self.ds.dtype.fields[n][:2]
            part = planes[:, offset:offset + dtype.itemsize, :].transpose(0, 2, 1).reshape(-1, dtype.itemsize)
            out[n] = np.ascontiguousarray(part[:rows]).view(dtype.base if dtype.shape else dtype).reshape(
                (rows, *dtype.shape))
        return out

    def fields(self, k: int, names: list[str], step: int = 1) -> dict[str, np.ndarray]:
        """Columns ``names`` of chunk ``k`` (a table; ``""`` names a dataset's plain elements), every
        ``step``-th row from the first."""
        start, stop = self.span(k)
        raw = self._inflated(k) if self.direct and self.row_items == 1 else None
        if raw is None:
            rows = self._hdf5(k)
            return {n: np.ascontiguousarray(rows[n][::step] if n else rows[::step]) for n in names}
        planes = raw.reshape(self.itemsize, -1)[:, :stop - start:step]
        out = {}
        for n in names:
            dtype, offset = (self.ds.dtype, 0) if not n else self.ds.dtype.fields[n][:2]
            part = planes[offset:offset + dtype.itemsize].T
            out[n] = np.ascontiguousarray(part).view(dtype.base if dtype.shape else dtype).reshape(
                (part.shape[0], *dtype.shape))
        return out


def chunk_places(ds: h5py.Dataset, path: str, what: str) -> dict[int, tuple[int, int, int]]:
    """Where each stored chunk of ``ds`` is in its file: first row -> (filter mask, byte offset, bytes), from one
    walk of HDF5's chunk index; empty when the file's addresses are not byte offsets (a user block before
    HDF5's data) or the index cannot be walked (each chunk is then asked of HDF5, which says what is wrong)."""
    if ds.file.userblock_size:
        return {}
    places: dict[int, tuple[int, int, int]] = {}

    def found(info: h5py.h5d.StoreInfo) -> None:
        places[int(info.chunk_offset[0])] = (int(info.filter_mask), int(info.byte_offset), int(info.size))

    try:
        with reading(path, f"{what}: the index of its chunks"):
            ds.id.chunk_iter(found)
    except FormatError:
        return {}
    return places
