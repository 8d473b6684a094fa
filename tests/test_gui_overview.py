"""The GUI's data side without Qt: columns from raw samples and from the pyramid, sample search, sessions, boxes."""

from __future__ import annotations

import json
from pathlib import Path

import h5py
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nicrig.acquisition.capture import CaptureSet, SourceSpec, pack_bits
from nicrig.companion import companion_path
from nicrig.gui import overview, session
from nicrig.gui.lanes import Boxes, box_drawing, channel_states
from nicrig.gui.overview import BASE_BIN, BlockCache, Pyramid

from nicrig.errors import FormatError


def _capture(path: Path, bits: np.ndarray, *, state: bool, period_ps: int = 15000, trigger: int = 0,
             offset_ps: int = 0) -> Path:
    """A capture set with one source ``s`` of ``bits`` (samples x channels), state or timing mode."""
    channels = [f"C{k}" for k in range(bits.shape[1])]
    with CaptureSet.create(path) as cs:
        if state:
            spec = SourceSpec("s", channels, "state", samplerate_hz=1e12 / period_ps, trigger_sample=trigger,
                              offset_ps=offset_ps)
            w = cs.add_source(spec, chunk_samples=4096)
            # uneven clock: gaps like a logic analyzer's stored-on-change state samples
            steps = np.where(np.arange(len(bits)) % 97 == 0, 7 * period_ps, period_ps)
            w.append(pack_bits(bits), np.cumsum(steps) - steps[0])
        else:
            spec = SourceSpec("s", channels, "timing", samplerate_hz=1e12 / period_ps, trigger_sample=trigger,
                              offset_ps=offset_ps)
            w = cs.add_source(spec, chunk_samples=4096)
            w.append(pack_bits(bits))
    return path


def _pyramid(path: Path, src) -> Pyramid:
    """The source's pyramid as the view maps it from the cache, built first."""
    assert overview.fill(path, src) is not None
    p = overview.load_cached(path, src)
    assert p is not None and p.complete
    return p


def _random_bits(n: int, channels: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    # long runs with occasional bursts of toggling, like bus control lines
    runs = rng.integers(1, 400, size=(n // 20 + 2, channels))
    out = np.zeros((n, channels), np.uint8)
    for c in range(channels):
        edges = np.cumsum(runs[:, c])
        out[:, c] = np.searchsorted(edges, np.arange(n), side="right") % 2
    return out


@pytest.mark.parametrize("state", [True, False])
def test_sample_search_matches_the_capture_reader(tmp_path: Path, state: bool) -> None:
    path = _capture(tmp_path / "s.h5", _random_bits(30000, 3, 1), state=state, trigger=1234, offset_ps=-777)
    with CaptureSet.open(path) as cs:
        src = cs.source("s")
        cache = BlockCache(src)
        times = src.times_ps()
        probes = np.concatenate([times[::997], times[::1009] + 1, times[[0, -1]] - 1, times[[-1]] + 10**6])
        for t in probes:
            assert cache.sample_at(int(t)) == src.sample_at(int(t)), t
        # the coarse index a finished pyramid gives must not change any answer
        cache = BlockCache(src, pyramid=_pyramid(path, src))
        for t in probes:
            assert cache.sample_at(int(t)) == src.sample_at(int(t)), t


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10**6), n=st.integers(1, 20000), t0=st.floats(0, 1), frac=st.floats(0.001, 1),
       pixels=st.integers(1, 3000))
def test_pyramid_marks_a_change_exactly_where_the_samples_change(tmp_path_factory, seed: int, n: int, t0: float,
                                                               frac: float, pixels: int) -> None:
    """Every transition falls in a column the pyramid marks as changing or between two held columns
    of different level; a column marked changing really holds both levels."""
    bits = _random_bits(n, 2, seed)
    path = _capture(tmp_path_factory.mktemp("p") / "p.h5", bits, state=bool(seed % 2))
    with CaptureSet.open(path) as cs:
        src = cs.source("s")
        p = _pyramid(path, src)
        times = src.times_ps()
        span = int(times[-1] - times[0]) + 1
        w0 = times[0] + t0 * span
        w1 = w0 + max(frac * span, 1.0)
        cols = p.columns(w0, w1, pixels)
        for ch in range(2):
            states = channel_states(cols, ch)
            # each column covers the level-1 bins starting in it: check against the raw samples of those bins
            bin_of_sample = np.arange(n) // BASE_BIN
            bin_start = times[::BASE_BIN]
            in_view = int(np.searchsorted(bin_start, w1, side="right"))  # bins starting after the view are not read
            for k in range(len(cols)):
                first = int(np.searchsorted(bin_start, cols.t_ps[k]))
                last = int(np.searchsorted(bin_start, cols.t_ps[k + 1])) if k + 1 < len(cols) else in_view
                held = bits[(bin_of_sample >= first) & (bin_of_sample < last), ch]
                expect = 2 if held.min() != held.max() else int(held[0])
                assert states[k] == expect


def test_raw_columns_are_exact_when_samples_are_wider_than_pixels(tmp_path: Path) -> None:
    bits = _random_bits(5000, 1, 7)
    path = _capture(tmp_path / "r.h5", bits, state=False, period_ps=8000)
    with CaptureSet.open(path) as cs:
        cache = BlockCache(cs.source("s"))
        cols = cache.columns(8000 * 100, 8000 * 300, 1000)  # 200 samples over 1000 pixels
        states = channel_states(cols, 0)
        assert 2 not in states
        np.testing.assert_array_equal(states, bits[99:301, 0])


def test_a_view_about_to_be_read_raw_has_its_samples_read_ahead(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                                  ) -> None:
    """A view drawn from the pyramid with at most ``READ_AHEAD_SAMPLES_PER_PIXEL`` samples a pixel has its blocks
    read on the read-ahead thread: zoomed in to raw samples, the window's thread reads nothing from the file and
    draws what a fresh cache reads. Once stopped (the file about to close) nothing more is read ahead."""
    import threading

    from nicrig.gui.lanes import SourceData
    from nicrig.gui.overview import RAW_SAMPLES_PER_PIXEL, READ_AHEAD_SAMPLES_PER_PIXEL, SampleReader

    bits = _random_bits(300_000, 2, 9)
    path = _capture(tmp_path / "a.h5", bits, state=True)
    main = threading.main_thread()
    read_here = []
    for name in ("packed", "times"):
        original = getattr(SampleReader, name)

        def counted(reader, s, e, *args, original=original):
            if threading.current_thread() is main:
                read_here.append((s, e))
            return original(reader, s, e, *args)

        monkeypatch.setattr(SampleReader, name, counted)
    with CaptureSet.open(path) as cs:
        src = cs.source("s")
        data = SourceData(src, _pyramid(path, src))
        pixels = 100
        times = src.times_ps(0, src.num_samples)
        wide = (int(times[150_000]), int(times[150_000 + READ_AHEAD_SAMPLES_PER_PIXEL * pixels // 2]))
        assert data.estimated_samples(*wide) > RAW_SAMPLES_PER_PIXEL * pixels
        read_here.clear()
        data.columns(*wide, pixels)  # from the pyramid; its samples read ahead
        assert read_here == [] and data.cache.ahead.future is not None
        data.cache.ahead.wait()
        narrow = (wide[0] + (wide[1] - wide[0]) // 3, wide[0] + (wide[1] - wide[0]) // 3 + (wide[1] - wide[0]) // 10)
        assert data.estimated_samples(*narrow) <= RAW_SAMPLES_PER_PIXEL * pixels
        cols = data.columns(*narrow, pixels)
        assert read_here == []  # taken from memory
        fresh = BlockCache(src).columns(*narrow, pixels)
        np.testing.assert_array_equal(cols.t_ps, fresh.t_ps)
        np.testing.assert_array_equal(channel_states(cols, 1), channel_states(fresh, 1))
        data.cache.ahead.stop()
        far = (int(times[20_000]), int(times[20_000 + READ_AHEAD_SAMPLES_PER_PIXEL * pixels // 2]))
        done = data.cache.ahead.future
        data.columns(*far, pixels)
        assert data.cache.ahead.future is done
        # overlapping windows read each block once, in order; more blocks than half the cache, none
        block = data.cache.block
        started: list[list[int]] = []
        few = BlockCache(src, blocks=6, pyramid=data.pyramid)
        monkeypatch.setattr(few.ahead, "start", lambda work, blocks: started.append(blocks))
        few.read_ahead((int(times[block + 10]), int(times[2 * block + 10])),
                       (int(times[2 * block + 20]), int(times[3 * block + 10])))
        assert started == [[1, 2, 3]]
        few.read_ahead((int(times[10]), int(times[3 * block + 10])))
        assert started == [[1, 2, 3]]


def test_a_cached_pyramid_maps_its_first_level_at_once_and_the_others_on_the_read_ahead_thread(
        tmp_path: Path) -> None:
    """Loaded from the cache, a pyramid maps level 1 (which the first view and every search read) at once and its
    coarser levels on the read-ahead thread, each the same as mapped when first drawn."""
    path = _capture(tmp_path / "m.h5", _random_bits(300_000, 2, 4), state=True)
    with CaptureSet.open(path) as cs:
        src = cs.source("s")
        assert overview.fill(path, src) is not None
        p = overview.load_cached(path, src)
        assert p is not None and len(p.sizes) >= 3 and p.mapping is not None
        p.mapping.result()
        assert all(level is not None for level in p._levels)
        for k in range(1, len(p.sizes) + 1):
            for part, got in zip(("t", "and", "or"), p.level(k)):
                np.testing.assert_array_equal(got, np.load(p.folder / f"L{k}.{part}.npy"))


def test_cached_pyramid_is_used_and_stale_one_ignored(tmp_path: Path) -> None:
    path = _capture(tmp_path / "c.h5", _random_bits(9000, 2, 3), state=True)
    with CaptureSet.open(path) as cs:
        src = cs.source("s")
        folder = overview.fill(path, src)
        assert folder is not None and folder.parent == overview.cache_paths(path)[0]
        loaded = overview.load_cached(path, src)
        assert loaded is not None and loaded.complete
        np.testing.assert_array_equal(loaded.level_one()[1], np.bitwise_and.reduceat(
            src.read_packed(), np.arange(0, 9000, BASE_BIN), axis=0))
    # same name, other samples: the cache must not be taken for it
    path.unlink()
    _capture(path, _random_bits(9001, 2, 4), state=True)
    with CaptureSet.open(path) as cs:
        assert overview.load_cached(path, cs.source("s")) is None
        folder = overview.fill(path, cs.source("s"))
        assert [f.name for f in folder.parent.iterdir()] == [folder.name]  # the stale one is gone
    # a damaged cache is ignored, not an error: a truncated level, then unreadable metadata
    level = folder / "L1.and.npy"
    level.write_bytes(level.read_bytes()[:-10])
    with CaptureSet.open(path) as cs:
        assert overview.load_cached(path, cs.source("s")) is None
    (folder / "pyramid.json").write_text("{not json")
    with CaptureSet.open(path) as cs:
        assert overview.load_cached(path, cs.source("s")) is None


def test_boxes_crowding_into_pixels_become_one_block_per_run(tmp_path: Path) -> None:
    t = np.arange(10000, dtype=np.float64) * 10
    boxes = Boxes(t, t + 5, np.zeros(10000, np.int8), lambda i: [f"box {i}"])
    d = box_drawing(boxes, 0, 100000, 1000, 0.0)
    assert len(d.rows) == 0 and len(d.dense_x0) <= 1000 and len(d.dense_x0) >= 1
    assert d.dense_x0[0] <= 0 and d.dense_x1[-1] >= 99990
    # zoomed in, the same boxes are drawn one by one
    d = box_drawing(boxes, 0, 200, 1000, 0.0)
    assert list(d.rows) == list(range(21))
    # a shift (deskew) moves them
    d = box_drawing(boxes, 0, 200, 1000, 50.0)
    assert d.x0[0] == 50.0



def test_a_wide_view_finds_its_pixel_edges_in_the_start_index(monkeypatch: pytest.MonkeyPatch) -> None:
    """A crowded lane's pixel edges are looked up in its start index (buckets of a power of two ns, about one
    row each), at the coarsest level with at least 16 buckets a pixel (kept when small, else read from the
    finest): each edge lands on the first row after it but for rows within half a bucket of it, with the style
    and end of the row before that one; a narrow view (buckets wider than 1/16 pixel) searches the starts."""
    from nicrig.gui import lanes

    rng = np.random.default_rng(5)
    t = np.sort(rng.uniform(-3e6, 7e6, 50_000)) + 0.25
    style = rng.integers(0, 5, len(t)).astype(np.int8)
    end = t + rng.uniform(1, 400, len(t))
    boxes = Boxes(t, end, style, lambda i: [])
    index = boxes.starts_index()
    bucket = float(index[0])
    assert bucket == 256 and index[-1] == len(t) and np.all(np.diff(index[1:]) >= 0)
    monkeypatch.setattr(lanes, "KEPT_LEVEL_EDGES", 10_000)  # levels 0 and 1 are read, not kept
    for lo, hi, level in ((-4e6, 12e6, 1), (-4e6, 76e6, 3), (0.0, 1602 * 16 * bucket, 0), (-4e6, 12e6, 1)):
        edges = np.linspace(lo, hi, 1603)
        px = edges[1] - edges[0]
        assert px / (lanes.BUCKETS_PER_PIXEL * bucket * 2 ** level) // 1 == 1  # 16 to 32 buckets a pixel
        k, style_before, end_before = boxes.edge_rows(edges, px)
        exact = np.searchsorted(t, edges)
        near = (np.abs(t[:, None] - edges[None, :]) <= bucket * 2 ** level / 2).sum(axis=0)
        assert np.all(np.abs(k - exact) <= near) and np.array_equal(k[near == 0], exact[near == 0])
        before = np.maximum(k - 1, 0)
        assert np.array_equal(style_before, style[before]) and np.array_equal(end_before, end[before])
    assert sorted(boxes._levels) == [3]
    # finer than the buckets: searched
    fine = np.linspace(0, 1600 * bucket, 1603)
    k, style_before, end_before = boxes.edge_rows(fine, fine[1] - fine[0])
    assert np.array_equal(k, np.searchsorted(t, fine))
    assert np.array_equal(style_before, style[np.maximum(k - 1, 0)])
    empty = Boxes(t[:0], t[:0], np.zeros(0, np.int8), lambda i: [])
    assert list(empty.edge_rows(edges, px)[0]) == [0] * len(edges)


def test_a_crowded_lane_is_drawn_as_its_rows_would_be_one_by_one() -> None:
    """The dense spans of a crowded view (pixel edges looked up in the start index) cover the same pixel
    columns, in the same styles, as the rows in view taken one by one, but for columns within 1/32 pixel of a
    row's start or end."""
    rng = np.random.default_rng(11)
    t = np.sort(rng.uniform(0, 1e7, 200_000))
    end = t + rng.uniform(1, 30, len(t))
    style = rng.integers(0, 4, len(t)).astype(np.int8)
    boxes = Boxes(t, end, style, lambda i: [])
    pixels, t0, t1 = 1000, 2e6, 6e6
    px = (t1 - t0) / pixels
    d = box_drawing(boxes, t0, t1, pixels, 0.0)
    assert len(d.rows) == 0 and len(d.dense_x0)
    drawn = np.full(pixels, -1)
    for a, b, s in zip(d.dense_x0, d.dense_x1, d.dense_style):
        drawn[int(round((a - t0) / px)):int(round((b - t0) / px)) + 1] = s
    left = t0 + np.arange(pixels) * px  # each column's left edge
    last = np.searchsorted(t, left + px) - 1  # the last row starting before its right edge
    before = np.maximum(np.searchsorted(t, left) - 1, 0)  # the last row starting before its left edge
    want = np.where(t[last] >= left, style[last], np.where(end[before] >= left, style[before], -1))
    near = np.abs(t[np.minimum(before + 1, len(t) - 1)] - left) < px / 32
    edge_near = near | np.roll(near, -1)
    assert np.mean((drawn == want) | edge_near) > 0.99


def test_session_round_trip_in_the_file(tmp_path: Path) -> None:
    path = _capture(tmp_path / "sess.h5", _random_bits(100, 1, 0), state=True)
    s = session.Session(offsets_ns={"s": 12.5}, markers=[("CSR setup", 100.0)], hidden=["s/C0"], order=["s/"],
                        view_ns=(0.0, 1e4), cursors_ns=(1.0, 2.0))
    raw = path.read_bytes()
    assert session.save(path, s) == companion_path(path)
    assert path.read_bytes() == raw  # the capture is never written: the session goes to its companion
    back, note = session.load(path)
    assert back == s and note == "session restored"
    with CaptureSet.open(path) as cs:  # still a valid capture set
        assert cs.source_names == ["s"]
    # saved again, replaced (not added to); decoded tables in the companion are kept
    with CaptureSet.open(path) as cs, cs.derived_update() as update:
        update.write_table("decoded/s/x", np.zeros(3, [("ss", "<i8")]))
    s2 = session.Session(offsets_ns={"s": -1.0})
    session.save(path, s2)
    assert session.load(path)[0] == s2
    with CaptureSet.open(path) as cs:
        assert cs.table_names() == ["decoded/s/x"]
        assert session.load(path, cs) == (s2, "session restored")  # read from the file the window holds open


def test_session_of_a_capture_set_written_before_companions(tmp_path: Path) -> None:
    path = _capture(tmp_path / "old.h5", _random_bits(100, 1, 0), state=True)
    s = session.Session(offsets_ns={"s": 3.0}, markers=[("M1", 7.0)])
    with h5py.File(path, "r+") as h5:  # where nicrig kept it before
        h5.attrs[session.ATTR] = session.to_json(s)
    assert session.load(path) == (s, "session restored")
    s.markers.append(("M2", 9.0))
    session.save(path, s)  # now into the companion, which is read first
    assert session.load(path) == (s, "session restored")


def test_session_of_a_results_file_goes_beside_it(tmp_path: Path) -> None:
    """A results file has no companion: its session is FILE.h5.session.json, replaced whole."""
    from nicrig.udpmon.results import LatencyVisit, ResultsFile, write_latency

    path = tmp_path / "lat.h5"
    with ResultsFile.create(path) as rf:
        rf.set_run("latency", peer="127.0.0.1:5001", argv=["test"], settings={}, remote={})
        write_latency(rf, [LatencyVisit(0, 0, 64, 0, 0, np.full(5, 20_000, np.int64))], mtu=1500, bin_us=1.0)
    raw = path.read_bytes()
    s = session.Session(offsets_ns={"host:local": 2.0})
    assert session.save(path, s) == session.sidecar(path)
    s.markers.append(("M", 1.0))
    session.save(path, s)
    assert session.load(path) == (s, "session restored") and path.read_bytes() == raw
    with ResultsFile.open(path) as rf:
        assert session.load(path, rf) == (s, "session restored")
    assert sorted(q.name for q in tmp_path.iterdir()) == ["lat.h5", "lat.h5.session.json"]


@settings(max_examples=200, deadline=None)
@given(st.one_of(st.text(), st.dictionaries(st.sampled_from(["offsets_ns", "markers", "hidden", "order", "view_ns",
                                                               "cursors_ns", "version"]),
                                             st.recursive(st.none() | st.booleans() | st.floats() | st.text(max_size=5)
                                                          | st.integers(), lambda c: st.lists(c, max_size=3)
                                                          | st.dictionaries(st.text(max_size=3), c, max_size=3)))
                 .map(json.dumps)))
def test_a_damaged_session_is_a_clear_error(text: str) -> None:
    try:
        s = session.from_json(text)
    except FormatError as exc:
        assert str(exc).startswith("GUI session")
    else:
        assert isinstance(s, session.Session)


@settings(max_examples=60, deadline=None)
@given(u=st.integers(1, 12), n=st.integers(0, 700), width=st.sampled_from([8, 64]), seed=st.integers(0, 10**6))
def test_fold_is_the_and_and_or_of_each_group_of_rows(u: int, n: int, width: int, seed: int) -> None:
    from nicrig.gui.overview import fold

    x = np.random.default_rng(seed).integers(0, 256, (n, u)).astype(np.uint8)
    x[::3] |= 0x81  # some bits held through a group, for AND to keep
    starts = np.arange(0, n, width)
    for op in (np.bitwise_and, np.bitwise_or):
        got = fold(x, width, op)
        assert got.shape == (len(starts), u)
        if n:
            np.testing.assert_array_equal(got, op.reduceat(x, starts, axis=0))


def test_stored_chunks_read_as_hdf5_reads_them_and_damage_is_an_error(tmp_path: Path) -> None:
    """Rows, a table's columns and every 64th timestamp as read from the stored chunks are HDF5's, asked of HDF5
    chunk by chunk or read where one walk of its index placed them (``every``); a chunk whose bytes changed is
    read through HDF5, whose checksum then fails: a FormatError naming the file."""
    from nicrig.gui.chunks import StoredChunks

    path = _capture(tmp_path / "k.h5", _random_bits(10000, 11, 5), state=True)
    table = np.zeros(1010, [("t_ns", "<i8"), ("t_end_ns", "<i8"), ("kind", "S8"), ("vec", "<i2", (3,))])
    table["t_ns"] = np.arange(1010) * 7
    table["t_end_ns"] = table["t_ns"] + 5
    table["kind"] = np.where(np.arange(1010) % 3, b"dma", b"csr")
    table["vec"] = np.arange(3030).reshape(1010, 3)
    with CaptureSet.open(path) as cs, cs.derived_update() as update:
        update.write_table("decoded/s/x", table)
    for every in (False, True):
        with CaptureSet.open(path) as cs:
            samples, stamps = cs.source("s").datasets
            ds = cs.table_dataset("decoded/s/x")
            for d in (samples, stamps, ds):
                chunks = StoredChunks(d, str(path), "test", every)
                assert chunks.direct and len(chunks) > 1 and len(chunks.places) == (len(chunks) if every else 0)
                np.testing.assert_array_equal(np.concatenate([chunks.rows(k) for k in range(len(chunks))]), d[()])
            chunks = StoredChunks(stamps, str(path), "test", every)
            every_64th = np.concatenate([chunks.fields(k, [""], 64)[""] for k in range(len(chunks))])
            np.testing.assert_array_equal(every_64th, stamps[::64])
            chunks = StoredChunks(ds, str(path), "test", every)
            cols = [chunks.fields(k, ["t_end_ns", "kind", "vec"]) for k in range(len(chunks))]
            for name in ("t_end_ns", "kind", "vec"):
                np.testing.assert_array_equal(np.concatenate([c[name] for c in cols]), table[name])
            # several chunks at once, the last one short
            assert len(table) % chunks.chunk_rows
            joined = chunks.fields_of(range(1, len(chunks)), ["t_end_ns", "vec"])
            for name in ("t_end_ns", "vec"):
                np.testing.assert_array_equal(joined[name], table[name][chunks.chunk_rows:])
            offset = stamps.id.get_chunk_info(1).byte_offset
    data = bytearray(path.read_bytes())
    data[offset + 50] ^= 0xFF
    path.write_bytes(bytes(data))
    for every in (False, True):
        with CaptureSet.open(path) as cs:
            chunks = StoredChunks(cs.source("s").datasets[1], str(path), "timestamps", every)
            with pytest.raises(FormatError, match="checksum fails"):
                chunks.fields(1, [""], 64)


def test_sample_search_over_many_blocks_with_long_idle_gaps(tmp_path: Path) -> None:
    """A state-mode source of several cache blocks whose clock stops for long stretches (a stored-on-change
    capture): without the pyramid's index the search probes, and must land on the same sample as the reader."""
    n = 5 * 65536 + 123
    rng = np.random.default_rng(11)
    steps = np.full(n, 15000, np.int64)
    steps[rng.integers(1, n, 6)] = 10**9  # idle: the clock is stopped for a millisecond
    steps[rng.integers(1, n, 40)] = 7 * 15000
    times = np.cumsum(steps) - steps[0]
    path = tmp_path / "gaps.h5"
    with CaptureSet.create(path) as cs:
        w = cs.add_source(SourceSpec("s", ["C0"], "state", samplerate_hz=1e12 / 15000), chunk_samples=65536)
        w.append(pack_bits((np.arange(n) % 3 == 0).astype(np.uint8)[:, None]), times)
    with CaptureSet.open(path) as cs:
        src = cs.source("s")
        cache = BlockCache(src)
        probes = np.concatenate([times[rng.integers(0, n, 60)], times[rng.integers(0, n, 60)] + 1,
                                 times[np.flatnonzero(steps == 10**9)] - 5, [times[0] - 1, times[-1], times[-1] + 1]])
        for t in probes:
            assert cache.sample_at(int(t)) == src.sample_at(int(t)), t


def test_a_piece_being_read_ahead_is_waited_for_not_read_twice() -> None:
    """The window's thread asking for a piece the read-ahead thread is reading takes that one read; a piece it is
    not reading is read at once; the kept pieces are the most recently used."""
    import threading

    from nicrig.gui.overview import Kept, ReadAhead

    ahead = ReadAhead()
    kept = Kept(2)
    reads: list[tuple[int, str]] = []
    begun, go = threading.Event(), threading.Event()

    def read(key: int, by: str) -> np.ndarray:
        reads.append((key, by))
        return np.full(3, key)

    def read_slowly() -> np.ndarray:
        begun.set()
        go.wait()
        return read(1, "ahead")

    ahead.start(kept.fill, 1, read_slowly)
    begun.wait()  # piece 1 is being read ahead
    go.set()  # its read may not have ended: then waited for
    np.testing.assert_array_equal(kept.get(1, lambda: read(1, "window")), np.full(3, 1))
    kept.get(2, lambda: read(2, "window"))
    kept.get(1, lambda: read(1, "window"))  # kept: not read again, and now the most recent
    kept.get(3, lambda: read(3, "window"))  # pushes out 2, the least recently used
    assert reads == [(1, "ahead"), (2, "window"), (3, "window")]
    assert 1 in kept and 3 in kept and 2 not in kept
    ahead.stop()
    ahead.start(kept.fill, 4, lambda: read(4, "ahead"))  # stopped: nothing more is started
    assert ahead.future.done() and 4 not in kept


def test_a_piece_queued_to_be_read_ahead_is_read_by_the_window_not_waited_for() -> None:
    """The one read-ahead thread runs every reader's work in turn: a piece the window's thread needs that is queued
    behind another reader's work is read at once by the window's thread (the read-ahead then finds it kept), and a
    read ahead that failed is read again by the window, which meets the error."""
    import threading

    from nicrig.gui.overview import Kept, ReadAhead

    other, mine = ReadAhead(), ReadAhead()
    kept = Kept(4)
    reads: list[tuple[int, str]] = []
    go = threading.Event()

    def read(key: int, by: str) -> np.ndarray:
        reads.append((key, by))
        return np.full(3, key)

    def read_ahead() -> None:
        for k in (1, 2):
            kept.fill(k, lambda k=k: read(k, "ahead"))

    # another reader's work holds the read-ahead thread (bounded only so that a window that waits fails, not hangs)
    other.start(go.wait, 60.0)
    mine.start(read_ahead)
    np.testing.assert_array_equal(kept.get(1, lambda: read(1, "window")), np.full(3, 1))
    go.set()
    mine.wait()
    assert reads == [(1, "window"), (2, "ahead")]

    def damaged() -> np.ndarray:
        raise OSError("damaged chunk")

    mine.start(kept.fill, 5, damaged)
    mine.wait()
    assert 5 not in kept
    with pytest.raises(OSError, match="damaged chunk"):
        kept.get(5, damaged)


def test_columns_when_the_last_edge_rounds_past_the_last_sample():
    # t0 + 447 * px is 256035003.00000003 in floating point, whose ceiling is past the last sample's time
    from nicrig.gui.overview import columns_from

    t = np.arange(0, 256_035_004, 15_000, dtype=np.int64)
    t[-1] = 256_035_003
    packed = np.zeros((len(t), 1), np.uint8)
    packed[-1] = 1
    cols = columns_from(t, packed, packed, -7825558.0, 590292.0827740493, int(t[-1]) + 15_000, int(t[-1]) + 15_000)
    # the last sample falls in the column before (a fraction of a pixel's rounding), its level kept there
    assert cols.t_ps[-1] <= t[-1] and int(cols.or_[-1, 0]) == 1 and int(cols.and_[-1, 0]) == 0
    assert np.all(np.diff(cols.t_ps) > 0)


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 10**6), n=st.integers(0, 300), unit=st.integers(1, 4), k=st.integers(1, 6))
def test_runs_merge_each_channels_equal_column_states(seed: int, n: int, unit: int, k: int) -> None:
    """:func:`overview.runs` (one pass in C) gives, channel after channel, each stretch of consecutive columns of
    one state (:func:`channel_states`, the level or 2 for changing) as one run: from its first column's start to the
    next run's, the last to the columns' end."""
    from nicrig.gui.overview import Columns, runs

    rng = np.random.default_rng(seed)
    and_ = rng.integers(0, 256, (n, unit), dtype=np.uint8)
    # mostly held levels (AND = OR), some changing bits, in stretches so that runs span several columns
    or_ = np.repeat(and_[::3], 3, axis=0)[:n] | (rng.integers(0, 256, (n, unit), dtype=np.uint8) &
                                                 rng.choice([0, 0x11, 0xff], (n, unit)).astype(np.uint8))
    and_ = np.repeat(and_[::3], 3, axis=0)[:n] & or_
    t = np.cumsum(rng.integers(1, 10**6, n)).astype(np.int64)
    cols = Columns(t, and_, or_, int(t[-1]) + 5 if n else 0, 0)
    bits = rng.integers(0, 8 * unit, k).tolist()
    start, end, state, counts = runs(cols, bits)
    assert counts.tolist() == [len(r) for r in (_merged(channel_states(cols, b)) for b in bits)]
    at = 0
    for b in bits:
        for first, last, s in _merged(channel_states(cols, b)):
            assert (start[at], end[at], state[at]) == (t[first], t[last + 1] if last + 1 < n else cols.end_ps, s)
            at += 1
    assert at == len(start) == len(end) == len(state)


def _merged(states: np.ndarray) -> list[tuple[int, int, int]]:
    """First and last column and state of each stretch of equal ``states``."""
    out: list[tuple[int, int, int]] = []
    for i, s in enumerate(states.tolist()):
        if out and out[-1][2] == s:
            out[-1] = (out[-1][0], i, s)
        else:
            out.append((i, i, s))
    return out


def test_runs_refuse_bits_outside_a_row() -> None:
    from nicrig.gui.overview import Columns, runs

    cols = Columns(np.arange(3, dtype=np.int64), np.zeros((3, 1), np.uint8), np.ones((3, 1), np.uint8), 3, 3)
    with pytest.raises(ValueError, match="bits within a row"):
        runs(cols, [8])
