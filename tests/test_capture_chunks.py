"""Sources written from chunks encoded outside HDF5 (encode_block, SourceWriter.append_encoded, append).

The reference is HDF5 itself: a source written through nicrig's encoder must hold, chunk for chunk, what the
chunks HDF5 stores when it filters the same samples itself hold once inflated (nicrig deflates with ISA-L, HDF5
with zlib: different streams of the same bytes), and read back through every reader as written.
"""

from __future__ import annotations

import multiprocessing
import pickle
from pathlib import Path

import h5py
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nicrig.acquisition import capture
from nicrig.acquisition.capture import CaptureSet, EncodedBlock, SourceSpec, encode_block
from nicrig import h5file
from nicrig.errors import UsageError
from nicrig.h5file import LIBVER, STORAGE
from stored_chunks import inflated

CHANNELS = [f"D{i}" for i in range(20)]  # 3 bytes a sample
CHUNK = 1024


def _spec(mode: str = "state") -> SourceSpec:
    return SourceSpec("s", CHANNELS, mode, samplerate_hz=66.67e6)


def _data(n: int, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    packed = rng.integers(0, 256, size=(n, 3), dtype=np.uint8)
    packed[n // 3: n // 2] = 0x55  # an idle stretch
    return packed, np.cumsum(rng.integers(1, 30_000, size=n)).astype(np.int64)


def _encoded_in_child(args: tuple[np.ndarray, np.ndarray, int]) -> EncodedBlock:
    return encode_block(*args)


def test_blocks_encoded_in_other_processes_read_back_as_written(tmp_path: Path) -> None:
    """The lead's use: forked workers encode, the writer's process stores the blocks in order."""
    packed, ts = _data(5 * CHUNK + 300)
    bounds = [0, 2 * CHUNK, 4 * CHUNK, len(packed)]
    jobs = [(packed[a:b], ts[a:b], CHUNK) for a, b in zip(bounds, bounds[1:])]
    with multiprocessing.get_context("fork").Pool(2) as pool:
        blocks = pool.map(_encoded_in_child, jobs)
    assert pickle.loads(pickle.dumps(blocks[0])) == blocks[0]
    path = tmp_path / "c.h5"
    with CaptureSet.create(path) as cs:
        w = cs.add_source(_spec(), chunk_samples=CHUNK)
        for block in blocks:
            w.append_encoded(block)
    with CaptureSet.open(path) as cs:
        s = cs.source("s")
        np.testing.assert_array_equal(s.read_packed(), packed)
        np.testing.assert_array_equal(s.times_ps() - s.times_ps(0, 1)[0], ts - ts[0])
        assert s.num_samples == len(packed)


def _encoded_on_this_process_threads(args: tuple[np.ndarray, np.ndarray, int]) -> EncodedBlock:
    return encode_block(*args, executor=h5file.encoder_pool())


def test_a_forked_child_encodes_on_threads_of_its_own(tmp_path: Path) -> None:
    """append's encoder threads exist in the parent; a child forked after them (simulate's workers) that
    encodes on the pool gets threads of its own instead of waiting on its parent's, which do not run in it."""
    packed, ts = _data(4 * CHUNK)
    with CaptureSet.create(tmp_path / "c.h5") as cs:
        cs.add_source(_spec(), chunk_samples=CHUNK).append(packed, ts)  # the parent's threads now exist
    with multiprocessing.get_context("fork").Pool(1) as pool:
        block = pool.apply_async(_encoded_on_this_process_threads, ((packed, ts, CHUNK),)).get(timeout=60)
    assert block == encode_block(packed, ts, CHUNK)


def test_an_encoded_block_must_start_on_a_chunk_boundary(tmp_path: Path) -> None:
    packed, ts = _data(3 * CHUNK)
    with CaptureSet.create(tmp_path / "c.h5") as cs:
        w = cs.add_source(_spec(), chunk_samples=CHUNK)
        w.append_encoded(encode_block(packed[:CHUNK + 10], ts[:CHUNK + 10], CHUNK))  # ends mid-chunk: the last
        with pytest.raises(UsageError, match="start on a chunk boundary.*1034 samples, 10 into a chunk of 1024"):
            w.append_encoded(encode_block(packed[CHUNK + 10:], ts[CHUNK + 10:], CHUNK))
        w.append(packed[CHUNK + 10:], ts[CHUNK + 10:])  # what follows an edge chunk goes through append
    with CaptureSet.open(tmp_path / "c.h5") as cs:
        np.testing.assert_array_equal(cs.source("s").read_packed(), packed)


def test_each_append_starts_at_or_after_the_last_stored_timestamp_whichever_way_it_was_stored(tmp_path: Path):
    """The order check compares with the last timestamp stored, kept from the append or block that stored it
    (a block carries its first and last), not read back from the file."""
    packed, ts = _data(3 * CHUNK)
    with CaptureSet.create(tmp_path / "c.h5") as cs:
        w = cs.add_source(_spec(), chunk_samples=CHUNK)
        block = encode_block(packed[:CHUNK], ts[:CHUNK], CHUNK)
        assert (block.first_ps, block.last_ps) == (ts[0], ts[CHUNK - 1])
        w.append_encoded(block)
        with pytest.raises(UsageError, match="must not decrease"):
            w.append(packed[CHUNK:CHUNK + 1], ts[CHUNK - 2:CHUNK - 1])
        w.append(packed[CHUNK:2 * CHUNK], ts[CHUNK:2 * CHUNK])
        with pytest.raises(UsageError, match="must not decrease"):
            w.append_encoded(encode_block(packed[2 * CHUNK:], ts[2 * CHUNK - 2:3 * CHUNK - 2], CHUNK))
        w.append_encoded(encode_block(packed[2 * CHUNK:], ts[2 * CHUNK:], CHUNK))
    with h5py.File(tmp_path / "c.h5") as f:
        np.testing.assert_array_equal(f["sources/s/timestamps_ps"][:], ts)


def test_append_encoded_checks_the_block_against_the_source(tmp_path: Path) -> None:
    packed, ts = _data(2 * CHUNK)
    with CaptureSet.create(tmp_path / "c.h5") as cs:
        w = cs.add_source(_spec(), chunk_samples=CHUNK)
        timing = cs.add_source(SourceSpec("t", CHANNELS, "timing", samplerate_hz=1e9), chunk_samples=CHUNK)
        with pytest.raises(UsageError, match="chunks of 512; the source has 3-byte samples in chunks of 1024"):
            w.append_encoded(encode_block(packed, ts, 512))
        with pytest.raises(UsageError, match="1-byte samples"):
            w.append_encoded(encode_block(packed[:, :1], ts, CHUNK))
        with pytest.raises(UsageError, match="state mode takes a block with timestamps"):
            w.append_encoded(encode_block(packed, None, CHUNK))
        with pytest.raises(UsageError, match="timing mode takes no timestamps"):
            timing.append_encoded(encode_block(packed, ts, CHUNK))
        w.append_encoded(encode_block(packed[:CHUNK], ts[CHUNK:], CHUNK))
        with pytest.raises(UsageError, match="timestamps must not decrease"):
            w.append_encoded(encode_block(packed[CHUNK:], ts[:CHUNK], CHUNK))
        with pytest.raises(UsageError, match="must not decrease"):
            encode_block(packed, ts[::-1], CHUNK)
        with pytest.raises(UsageError, match="3 timestamps for 2048 samples"):
            encode_block(packed, ts[:3], CHUNK)
        timing.append_encoded(encode_block(packed, None, CHUNK))
    with CaptureSet.open(tmp_path / "c.h5") as cs:
        np.testing.assert_array_equal(cs.source("s").read_packed(), packed[:CHUNK])
        np.testing.assert_array_equal(cs.source("t").read_packed(), packed)


def test_a_source_with_other_filters_takes_no_encoded_blocks_and_appends_as_before(tmp_path: Path) -> None:
    """A capture of an older nicrig (no Fletcher32): append goes through HDF5's filters, append_encoded refuses."""
    path = tmp_path / "old.h5"
    packed, ts = _data(3 * CHUNK + 5)
    with CaptureSet.create(path) as cs:
        cs.add_source(_spec(), chunk_samples=CHUNK)
    with h5py.File(path, "r+") as f:
        g = f["sources/s"]
        for name, row, dtype in (("samples", (3,), np.uint8), ("timestamps_ps", (), np.int64)):
            del g[name]
            g.create_dataset(name, shape=(0, *row), maxshape=(None, *row), dtype=dtype, chunks=(CHUNK, *row),
                             compression="gzip", compression_opts=1, shuffle=True)
    with CaptureSet.amend(path) as cs:
        w = cs.writer("s")
        with pytest.raises(UsageError, match="not stored as nicrig stores them now.*append samples with append"):
            w.append_encoded(encode_block(packed, ts, CHUNK))
        w.append(packed, ts)
    with CaptureSet.open(path) as cs:
        np.testing.assert_array_equal(cs.source("s").read_packed(), packed)
        assert cs.checksum_coverage()["unchecked"] == ["sources/s/samples", "sources/s/timestamps_ps"]


@settings(deadline=None, max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sizes=st.lists(st.integers(0, 3 * CHUNK), min_size=1, max_size=5), seed=st.integers(0, 2**16))
def test_append_stores_chunks_that_decode_as_hdf5s(tmp_path: Path, sizes: list[int], seed: int, monkeypatch) -> None:
    """Appends of any sizes (aligned or not) leave every chunk holding what HDF5's own filters leave in it; from
    each append's first chunk boundary on, nicrig encodes them (samples and timestamps), the rest HDF5 does."""
    packed, ts = _data(sum(sizes), seed)
    path = tmp_path / "c.h5"
    encoded = []

    def noted(data, chunk_rows, filters):
        encoded.append(len(data))
        return h5file.encode_chunk(data, chunk_rows, filters)

    with CaptureSet.create(path) as cs, monkeypatch.context() as patch:
        patch.setattr(capture, "encode_chunk", noted)
        w = cs.add_source(_spec(), chunk_samples=CHUNK)
        start = 0
        for k in sizes:
            w.append(packed[start:start + k], ts[start:start + k])
            start += k
    heads = [min(k, -sum(sizes[:i]) % CHUNK) for i, k in enumerate(sizes)]
    assert sum(encoded) == 2 * sum(k - head for k, head in zip(sizes, heads))
    ref = tmp_path / "ref.h5"
    with h5py.File(ref, "w", libver=LIBVER) as f:  # the same rows through H5Dwrite, appended the same way
        for name, rows in (("samples", packed), ("timestamps_ps", ts)):
            ds = f.create_dataset(name, shape=(0, *rows.shape[1:]), maxshape=(None, *rows.shape[1:]),
                                  dtype=rows.dtype, chunks=(CHUNK, *rows.shape[1:]), **STORAGE)
            start = 0
            for k in sizes:
                ds.resize((start + k, *rows.shape[1:]))
                ds[start:start + k] = rows[start:start + k]
                start += k
    with h5py.File(path, "r") as got, h5py.File(ref, "r") as want:
        for name in ("samples", "timestamps_ps"):
            a, b = got[f"sources/s/{name}"], want[name]
            assert a.shape == b.shape
            for c in range(0, a.shape[0], CHUNK):
                offset = (c, *[0] * (a.ndim - 1))
                assert inflated(a, offset) == inflated(b, offset), f"{name} chunk at {c}"
    with CaptureSet.open(path) as cs:
        np.testing.assert_array_equal(cs.source("s").read_packed(), packed)
