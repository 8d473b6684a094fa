"""Chunks nicrig encodes itself (nicrig.h5file.encode_chunk) decode, in HDF5, to the rows HDF5's own chunks hold.

The deflate stream is ISA-L's, not the zlib HDF5 calls, so the stored bytes differ from H5Dwrite's; what must
hold is what a reader sees. HDF5 is the judge throughout: its creation property lists give the filters and
their order, its decoding (checksum checked) the values of chunks written with ``write_direct_chunk``, and
h5dump, a program of its own, reads them too. Chunk by chunk, zlib's own inflate (the one HDF5's deflate
filter calls, which checks the stream's Adler-32) turns ours and HDF5's into the same shuffled bytes, edge
chunks' fill included.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nicrig.acquisition.capture import DEFAULT_CHUNK_SAMPLES, CaptureSet, SourceSpec
from nicrig import h5file
from nicrig.errors import UsageError
from nicrig.h5file import STORAGE, LIBVER, dataset_filters, encode_chunk, storage_filters, store
from stored_chunks import inflated

# The element layouts captures use: packed samples of 1..12 bytes ((n, unitsize) uint8) and int64 timestamps.
LAYOUTS = [(np.dtype(np.uint8), (w,)) for w in (1, 2, 3, 6, 12)] + [(np.dtype(np.int64), ())]


def _dataset(f: h5py.File, name: str, dtype: np.dtype, row: tuple[int, ...], chunk: int) -> h5py.Dataset:
    """A resizable dataset stored as nicrig stores sources (SourceWriter's datasets)."""
    return f.create_dataset(name, shape=(0, *row), maxshape=(None, *row), dtype=dtype, chunks=(chunk, *row),
                            **STORAGE)


@st.composite
def arrays(draw: st.DrawFn) -> tuple[np.ndarray, int]:
    """(rows, chunk_rows): random or repetitive data of a capture layout, full and edge chunks."""
    dtype, row = draw(st.sampled_from(LAYOUTS))
    chunk = draw(st.integers(1, 300))
    n = draw(st.integers(0, 3 * chunk + 1))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    kind = draw(st.sampled_from(["random", "repetitive", "ones", "ramp"]))
    shape = (n, *row)
    if kind == "random":
        data = rng.integers(np.iinfo(dtype).min, np.iinfo(dtype).max, size=shape, dtype=dtype, endpoint=True)
    elif kind == "repetitive":  # bus idle with a few edges: compresses to little
        levels = np.repeat(rng.integers(0, 4, size=n // 17 + 1), 17)[:n].astype(dtype)
        data = np.ascontiguousarray(np.broadcast_to(levels.reshape(n, *[1] * len(row)), shape))
    elif kind == "ones":  # every 16-bit word 0xffff: Fletcher's sums are 0 modulo 65535, HDF5 keeps them as 0xffff
        data = np.full(shape, -1 if dtype.kind == "i" else 255, dtype=dtype)
    else:  # timestamps of a clock
        data = (np.arange(n * max(1, int(np.prod(row))), dtype=np.int64) * 15000 + seed).astype(dtype).reshape(shape)
    return data, chunk


def _pieces(draw: st.DrawFn, n: int) -> list[int]:
    cuts = sorted(draw(st.lists(st.integers(0, n), max_size=4)))
    return [b - a for a, b in zip([0, *cuts], [*cuts, n])]


@settings(deadline=None, max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=arrays(), data=st.data())
def test_encoded_chunks_decode_to_what_hdf5s_chunks_hold(tmp_path: Path, case: tuple[np.ndarray, int],
                                                         data: st.DataObject) -> None:
    rows, chunk = case
    path = tmp_path / "both.h5"
    with h5py.File(path, "w", libver=LIBVER) as f:
        theirs = _dataset(f, "hdf5", rows.dtype, rows.shape[1:], chunk)
        start = 0
        for k in _pieces(data.draw, len(rows)):  # grown as a writer grows it: edge chunks rewritten by HDF5
            theirs.resize((start + k, *rows.shape[1:]))
            theirs[start:start + k] = rows[start:start + k]
            start += k
        ours = _dataset(f, "nicrig", rows.dtype, rows.shape[1:], chunk)
        ours.resize(rows.shape)
        filters = dataset_filters(ours)
        assert filters == dataset_filters(theirs) == storage_filters(rows.dtype.itemsize)
        for c in range(0, len(rows), chunk):
            ours.id.write_direct_chunk((c, *[0] * (rows.ndim - 1)), encode_chunk(rows[c:c + chunk], chunk, filters))
    with h5py.File(path, "r") as f:  # HDF5 decodes every chunk of both and checks its Fletcher32 sum
        for c in range(0, len(rows), chunk):
            offset = (c, *[0] * (rows.ndim - 1))
            assert inflated(f["nicrig"], offset) == inflated(f["hdf5"], offset), f"chunk at row {c}"
        np.testing.assert_array_equal(f["nicrig"][()], rows)
        np.testing.assert_array_equal(f["nicrig"][()], f["hdf5"][()])


@settings(deadline=None, max_examples=100, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=arrays())
def test_hdf5_reads_chunks_written_directly(tmp_path: Path, case: tuple[np.ndarray, int]) -> None:
    rows, chunk = case
    path = tmp_path / "direct.h5"
    with h5py.File(path, "w", libver=LIBVER) as f:
        ds = _dataset(f, "x", rows.dtype, rows.shape[1:], chunk)
        ds.resize(rows.shape)
        for c in range(0, len(rows), chunk):
            ds.id.write_direct_chunk((c, *[0] * (rows.ndim - 1)), encode_chunk(rows[c:c + chunk], chunk,
                                                                               dataset_filters(ds)))
    with h5py.File(path, "r") as f:  # HDF5 decodes every chunk and checks its Fletcher32 sum
        np.testing.assert_array_equal(f["x"][()], rows)
        if len(rows) > 1:
            np.testing.assert_array_equal(f["x"][1:-1], rows[1:-1])


def test_hdf5_refuses_a_directly_written_chunk_whose_bytes_changed(tmp_path: Path) -> None:
    """The appended Fletcher32 sum is the one HDF5 checks: a chunk altered after encoding fails to read."""
    rows = np.arange(5000, dtype=np.int64)
    path = tmp_path / "bad.h5"
    with h5py.File(path, "w", libver=LIBVER) as f:
        ds = _dataset(f, "x", rows.dtype, (), 4096)
        ds.resize(rows.shape)
        good = encode_chunk(rows[:4096], 4096, dataset_filters(ds))
        bad = bytearray(encode_chunk(rows[4096:], 4096, dataset_filters(ds)))
        bad[len(bad) // 2] ^= 0x10
        ds.id.write_direct_chunk((0,), good)
        ds.id.write_direct_chunk((4096,), bytes(bad))
    with h5py.File(path, "r") as f:
        np.testing.assert_array_equal(f["x"][:4096], rows[:4096])
        with pytest.raises(OSError):
            f["x"][4096:]


def test_filters_come_from_the_dataset_in_hdf5s_order(tmp_path: Path) -> None:
    """What a capture set's sources and tables hold is what storage_filters says, in the order HDF5 runs them."""
    with CaptureSet.create(tmp_path / "c.h5") as cs:
        w = cs.add_source(SourceSpec("s", [f"D{i}" for i in range(20)], "state", samplerate_hz=1e6))
        cs.write_table("truth/t", np.zeros(3, dtype=[("a", "<i8"), ("b", "<u2")]))
    with h5py.File(tmp_path / "c.h5", "r") as f:
        assert dataset_filters(f["sources/s/samples"]) == storage_filters(1)
        assert dataset_filters(f["sources/s/timestamps_ps"]) == storage_filters(8)
        assert dataset_filters(f["truth/t"]) == storage_filters(10)
        assert [code for code, _ in storage_filters(1)] == [h5py.h5z.FILTER_SHUFFLE, h5py.h5z.FILTER_DEFLATE,
                                                            h5py.h5z.FILTER_FLETCHER32]
        assert f["sources/s/samples"].chunks == (DEFAULT_CHUNK_SAMPLES, 3)
    del w


def test_other_filters_and_oversized_chunks_are_refused() -> None:
    with pytest.raises(UsageError, match="filter 32000"):
        encode_chunk(np.zeros(4, np.uint8), 4, ((32000, ()),))
    with pytest.raises(UsageError, match="deflate level 6"):
        encode_chunk(np.zeros(4, np.uint8), 4, ((h5py.h5z.FILTER_DEFLATE, (6,)),))
    with pytest.raises(UsageError, match="holds 4 rows"):
        encode_chunk(np.zeros(5, np.uint8), 4, storage_filters(1))


@pytest.mark.skipif(shutil.which("h5dump") is None, reason="h5dump (Debian hdf5-tools, make sysdeps) not installed")
def test_h5dump_reads_chunks_written_directly(tmp_path: Path) -> None:
    """HDF5's own dump program decodes the chunks (and their checksums) of a capture set written that way."""
    rng = np.random.default_rng(7)
    n = 3 * 4096 + 123
    packed = rng.integers(0, 256, size=(n, 3), dtype=np.uint8)
    packed[1000:9000] = 0  # long idle stretches, as on a bus
    ts = np.cumsum(rng.integers(0, 40_000, size=n)).astype(np.int64)
    path = tmp_path / "c.h5"
    with CaptureSet.create(path) as cs:
        w = cs.add_source(SourceSpec("s", [f"D{i}" for i in range(20)], "state", samplerate_hz=66.67e6),
                          chunk_samples=4096)
        w.append(packed, ts)
    for name, want in (("samples", packed), ("timestamps_ps", ts)):
        out = tmp_path / f"{name}.bin"
        r = subprocess.run(["h5dump", "-b", "LE", "-d", f"/sources/s/{name}", "-o", str(out), str(path)],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        assert out.read_bytes() == want.astype(want.dtype.newbyteorder("<")).tobytes()
    r = subprocess.run(["h5ls", "-v", f"{path}/sources/s/samples"], capture_output=True, text=True)
    assert r.returncode == 0 and "fletcher32" in r.stdout.lower() and "deflate" in r.stdout.lower(), r.stdout


# Table columns as nicrig's tables have them: integers, reals, flags and fixed-length names.
COLUMN_TYPES = ["<i1", "<u1", "<i2", "<u4", "<i8", "<u8", "<f4", "<f8", "?", "S5", "S24"]


@st.composite
def tables(draw: st.DrawFn) -> np.ndarray:
    kinds = draw(st.lists(st.sampled_from(COLUMN_TYPES), min_size=1, max_size=6))
    dtype = np.dtype([(f"c{i}", k) for i, k in enumerate(kinds)])
    n = draw(st.integers(1, 5000))
    raw = np.random.default_rng(draw(st.integers(0, 2**32 - 1))).integers(0, 256, n * dtype.itemsize, np.uint8)
    rows = raw.view(dtype).copy()
    for name, kind in zip(dtype.names, kinds):
        if kind == "?":
            rows[name] = raw[:n] & 1  # HDF5 keeps a flag as 0/1
        elif kind.startswith("<f"):
            rows[name] = np.nan_to_num(rows[name])
    return rows


@settings(deadline=None, max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.one_of(tables(), arrays().map(lambda case: case[0]).filter(len)))
def test_store_writes_chunks_that_decode_as_hdf5s(tmp_path: Path, rows: np.ndarray, monkeypatch) -> None:
    """Tables (and arrays) stored through the encoder threads hold, chunk for chunk, what H5Dwrite's chunks
    decode to; every table and every array chunked along its first axis only is encoded so (not left to
    H5Dwrite)."""
    encoded = []

    def noted(data, chunk_rows, filters):
        encoded.append(len(data))
        return encode_chunk(data, chunk_rows, filters)

    with h5py.File(tmp_path / "ours.h5", "w", libver=LIBVER) as ours, \
            h5py.File(tmp_path / "hdf5.h5", "w", libver=LIBVER) as theirs, monkeypatch.context() as patch:
        patch.setattr(h5file, "encode_chunk", noted)
        a = store(ours, "t", rows)
        b = theirs.create_dataset("t", data=rows, chunks=True, **STORAGE)
        assert a.chunks == b.chunks and a.dtype == b.dtype
        assert sum(encoded) == (len(rows) if rows.ndim == 1 or a.chunks[1:] == rows.shape[1:] else 0)
    with h5py.File(tmp_path / "ours.h5", "r") as f, h5py.File(tmp_path / "hdf5.h5", "r") as g:
        for c in range(0, len(rows), f["t"].chunks[0]):
            offset = (c, *[0] * (rows.ndim - 1))
            assert inflated(f["t"], offset) == inflated(g["t"], offset), f"chunk at row {c}"
        assert f["t"][()].tobytes() == rows.tobytes() == g["t"][()].tobytes()


def _planes(data: bytes, size: int) -> bytes:
    """HDF5's shuffle (H5Zshuffle.c) by its definition: byte j of every whole element, for j = 0 .. size - 1, then
    the bytes after the last whole element as they are."""
    whole = len(data) // size * size
    return b"".join(data[j:whole:size] for j in range(size)) + data[whole:]


@settings(max_examples=300, deadline=None)
@given(size=st.one_of(st.sampled_from([1, 2, 3, 4, 8, 12]), st.integers(1, 40)), n=st.integers(0, 200),
       rest=st.integers(0, 7), seed=st.integers(0, 2**32 - 1))
def test_the_shuffle_lays_out_hdf5s_byte_planes(size: int, n: int, rest: int, seed: int) -> None:
    """nicrig._h5shuffle (C, with an SSE2 path for 8-byte elements 16 at a time) against the definition, over
    element counts around its blocks of 16 and bytes left over after the last whole element."""
    from nicrig._h5shuffle import shuffle

    data = np.random.default_rng(seed).integers(0, 256, n * size + rest % size, dtype=np.uint8).tobytes()
    assert shuffle(data, size) == _planes(data, size)
    assert shuffle(memoryview(data), size) == _planes(data, size)


def test_the_shuffle_refuses_a_size_below_one_and_what_is_not_bytes() -> None:
    from nicrig._h5shuffle import shuffle

    with pytest.raises(ValueError, match="element size 0"):
        shuffle(b"abcd", 0)
    with pytest.raises(TypeError):
        shuffle("abcd", 2)
    with pytest.raises(ValueError, match="not C-contiguous"):
        shuffle(np.arange(8)[::2], 8)


def test_the_shuffle_of_fewer_bytes_than_one_element_is_the_bytes_at_once() -> None:
    """No whole element: the bytes unchanged (HDF5's shuffle), whatever the size; the loop once counted out
    size empty planes (2**63 - 1 of them here: no end). In a child, so that a hang fails the test, not the run."""
    code = ("import sys; from nicrig._h5shuffle import shuffle; "
            "assert shuffle(b'abc', sys.maxsize) == b'abc' and shuffle(b'', 2**40) == b''")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
