"""What HDF5 stores for one chunk of a dataset nicrig writes (shuffle, deflate, Fletcher32), read outside HDF5."""

from __future__ import annotations

import zlib

import h5py

#: Bytes of HDF5's Fletcher32 checksum at the end of every stored chunk (the last filter on write).
FLETCHER_BYTES = 4


def inflated(ds: h5py.Dataset, offset: tuple[int, ...]) -> bytes:
    """The chunk of ``ds`` at ``offset`` as stored (all filters applied: mask 0), without its checksum, inflated
    by zlib (the library HDF5's deflate filter calls; it checks the stream's Adler-32): the shuffled rows."""
    mask, stored = ds.id.read_direct_chunk(offset)
    assert mask == 0, f"chunk at {offset}: filter mask {mask:#x}"
    return zlib.decompress(stored[:-FLETCHER_BYTES])
