"""Damaged and hostile files through every reader, with ``nicrig verify`` beside them.

"ok" from verify must mean every command reads the file: whenever a reader (info, events, export, report,
gui, decode) reports damage, verify reports it too. So wherever verify says ok, every reader runs and must
work (where verify finds damage the readers may refuse the file: one of them runs, to see it say so in one
line). Small real files (a simulated capture set, decoded, with the udpmon results it carries; a latency
results file; a simulated stream set) are damaged the ways a disk, a hand edit or an attacker would: bits
flipped in their metadata (attributes, object headers, heaps), rows declared but never stored, attribute
values at every bound the docs give and just past it, tables empty or of one row. Readers run in this process
(an exception escaping one fails the test), so the sweeps cost what the commands' work costs, not
interpreter starts.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import random
import shutil
from collections.abc import Callable
from pathlib import Path

import h5py
import numpy as np
import pytest
from conftest import simulate_set
from hostile import declared, rewritten
from nicrig.acquisition.sim.rig import Recording
from nicrig.udpmon.results import LatencyVisit, ResultsFile, write_latency

from nicrig.cli import main
from nicrig.companion import companion_path

MAX = 2**63 - 1


def run(*argv: str | Path) -> tuple[int, str]:
    """``nicrig ARGV`` in this process: exit code and stderr (stdout dropped); an exception fails the test."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main([str(a) for a in argv])
    assert "Traceback" not in err.getvalue(), err.getvalue()
    return rc, err.getvalue()


def readers(path: Path, kind: str) -> dict[str, tuple[str | Path, ...]]:
    """Every command that reads a file of ``kind``, as a user runs it; decode last (it writes the companion)."""
    folder = path.parent
    every: dict[str, tuple[str | Path, ...]] = {"info": ("info", path)}
    if kind == "capture":
        every["events"] = ("events", path, "--source", "send_pci", "--decoder", "pci", "--limit", "3")
        every["export"] = ("export", path, "--source", "send_pci", "-o", folder / "x.vcd")
    every["report"] = ("report", path, "-o", folder / "r.json")
    every["gui"] = ("gui", path, "--screenshot", folder / "s.png", "--size", "400x300")
    if kind == "capture":
        every["decode"] = ("decode", path, "--force")
    return every


def agree(path: Path, kind: str, when_damaged: tuple[str, ...] = ("info",)) -> tuple[int, dict[str, int]]:
    """Run verify, then the readers; assert they agree. Verify's exit code and each reader's.

    Where verify says ok, every reader runs and must work: "ok" means every command reads the file. Where
    verify finds damage any reader may refuse the file, so only ``when_damaged`` run there (the command line's
    answer: one line naming the file, no traceback). A reader "reports damage" with exit 2; ``events`` exits 1
    on a table without rows, which is no damage."""
    v_rc, v_err = run("verify", path)
    assert v_rc in (0, 1), v_err
    got: dict[str, int] = {}
    said: dict[str, str] = {}
    for name, argv in readers(path, kind).items():
        if v_rc and name not in when_damaged:
            continue
        got[name], said[name] = run(*argv)
        assert got[name] in (0, 1, 2), (name, said[name])
        if got[name] == 2:  # one line naming the file (or its companion of derived tables)
            assert path.name in said[name] or companion_path(path).name in said[name], (name, said[name])
    damaged = {n: said[n] for n, rc in got.items() if rc == 2 or (rc == 1 and n != "events")}
    if damaged:
        assert v_rc == 1, f"verify said ok where {', '.join(damaged)} said: {damaged}"
    if v_rc == 0:
        assert not damaged
    return v_rc, got


def copy_of(src: Path, folder: Path) -> Path:
    """``src`` and its companion copied into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    dst = folder / src.name
    shutil.copy(src, dst)
    if companion_path(src).exists():
        shutil.copy(companion_path(src), companion_path(dst))
    return dst


@pytest.fixture(scope="module")
def capture(tmp_path_factory) -> Path:
    """A small capture of the kind users damage: latency, SK-9843 on PCI 32/33, AD recorded, 2 samples a clock
    (timing-mode buses, a state-mode probe), decoded; it carries the simulated applications' results."""
    folder = tmp_path_factory.mktemp("capture")
    path = simulate_set(folder, "cap", kind="latency", size_bytes=1400, count=2, nic="sk9843", bus="pci32-33",
                        recording=Recording(with_ad=True, samples_per_clock=2))
    assert run("decode", path)[0] == 0
    return path


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> Path:
    rng = np.random.default_rng(3)
    visits = [LatencyVisit(r, p, s, 0, 0, (20_000 + 12 * s + rng.normal(0, 300, 6)).astype(np.int64))
              for r in range(2) for p, s in enumerate((64, 512, 1472))]
    path = tmp_path_factory.mktemp("results") / "lat.h5"
    with ResultsFile.create(path) as rf:
        rf.set_run("latency", peer="127.0.0.1:5001", argv=["test"], settings={}, remote={})
        write_latency(rf, visits, mtu=1500, bin_us=1.0)
    return path


@pytest.fixture(scope="module")
def stream(tmp_path_factory) -> Path:
    """A simulated stream set, decoded: its results carry the stream tables and their attributes."""
    path = simulate_set(tmp_path_factory.mktemp("stream"), "st", kind="stream", size_bytes=1400, spacing_us=11,
                        count=4)
    assert run("decode", path)[0] == 0
    return path


# -- bits flipped in the metadata ------------------------------------------------------------------------
def metadata_offsets(path: Path) -> np.ndarray:
    """Byte offsets of ``path`` outside every dataset's stored data: superblock, object headers, attributes,
    heaps, chunk indexes (what Fletcher32 on the chunks does not cover)."""
    outside = np.ones(path.stat().st_size, dtype=bool)

    def visit(_name: str, obj: object) -> None:
        if isinstance(obj, h5py.Dataset):
            if obj.chunks is not None:
                obj.id.chunk_iter(lambda c: outside.__setitem__(slice(c.byte_offset, c.byte_offset + c.size), False))
            elif obj.id.get_offset() is not None:
                outside[obj.id.get_offset(): obj.id.get_offset() + obj.id.get_storage_size()] = False

    with h5py.File(path, "r") as h5:
        h5.visititems(visit)
    return np.flatnonzero(outside)


def flipped(src: Path, folder: Path, offset: int, mask: int) -> Path:
    path = copy_of(src, folder)
    raw = bytearray(path.read_bytes())
    raw[offset] ^= mask
    path.write_bytes(bytes(raw))
    return path


def targeted(raw: bytes, needle: bytes) -> int:
    at = raw.find(needle)
    assert at >= 0, needle
    return at


#: Where a flipped bit hits what every reader reads first: an attribute's name in a source's attribute storage
#: (verify once read no attributes there), and variable-length strings, kept in HDF5's global heap, which
#: has no checksum: a JSON attribute's text (its quote becomes a space), a channel's name (a role then names a
#: channel the source lacks), the format's name.
CAPTURE_TARGETS = [(b"trigger_sample", 1), (b'"frame": "FRAME#"', 0), (b"IRDY#", 1), (b"nicrig-capture-set", 1)]


@pytest.mark.parametrize("needle, at", CAPTURE_TARGETS, ids=[t[0].decode() for t in CAPTURE_TARGETS])
def test_a_flip_where_readers_look_first_is_found_by_verify(capture, tmp_path, needle, at):
    raw = capture.read_bytes()
    path = flipped(capture, tmp_path / "v", targeted(raw, needle) + at, 0x02)
    v_rc, got = agree(path, "capture", when_damaged=("info", "decode"))
    assert v_rc == 1 and got["info"] == got["decode"] == 2


def sampled(src: Path, count: int, seed: int) -> list[int]:
    """``count`` metadata offsets of ``src``, the same every run."""
    offsets = metadata_offsets(src)
    return sorted(random.Random(seed).sample(list(offsets), count))


def sweep(src: Path, kind: str, folder: Path, count: int, seed: int) -> dict[str, int]:
    """Flip one bit at each of ``count`` sampled metadata offsets; verify first, and every reader where verify
    says ok (a reader reporting damage there fails the test: verify disagrees). How the variants went."""
    tally = {"verify damaged": 0, "verify ok": 0}
    for k, offset in enumerate(sampled(src, count, seed)):
        path = flipped(src, folder / str(k), offset, 1 << (offset % 8))
        rc, _ = run("verify", path)
        assert rc in (0, 1), (offset, rc)
        if rc == 1:
            tally["verify damaged"] += 1
            continue
        tally["verify ok"] += 1
        agree(path, kind)
    return tally


def test_sampled_metadata_flips_in_a_capture_set(capture, tmp_path):
    tally = sweep(capture, "capture", tmp_path, 12, 27)
    assert tally["verify damaged"] and tally["verify ok"]  # both kinds of outcome were exercised


def test_sampled_metadata_flips_in_a_results_file(results, tmp_path):
    raw = results.read_bytes()
    path = flipped(results, tmp_path / "kind", targeted(raw, b"nicrig-results") + 3, 0x04)
    v_rc, got = agree(path, "results", when_damaged=("info", "report", "gui"))
    assert v_rc == 1 and set(got.values()) == {2}
    tally = sweep(results, "results", tmp_path, 8, 27)
    assert tally["verify damaged"]


# -- declared but never stored ---------------------------------------------------------------------------
@pytest.mark.parametrize("where, dataset, rows", [
    ("capture", "sources/send_pci/samples", 2**40),   # 1.1 trillion samples in a ~100 KB file
    ("capture", "sources/probe/timestamps_ps", 2**36),
    ("capture", "truth/packets", 2**34),
    ("companion", "decoded/send_pci/pci", 2**34),
    ("capture", "results/latency/rtt", 2**34),       # report and gui asked for 544 GiB
])
def test_rows_declared_but_never_stored(capture, tmp_path, where, dataset, rows):
    path = copy_of(capture, tmp_path)
    declared(companion_path(path) if where == "companion" else path, dataset, rows)
    _, out = run_out("verify", "--json", path)
    damage = [d for f in json.loads(out)["files"] for d in f["damage"] if d["dataset"] == dataset]
    assert damage and damage[0]["stop"] == rows  # named by its rows, found without reading them
    v_rc, got = agree(path, "capture", when_damaged=("info", "report", "gui", "decode"))
    assert v_rc == 1 and got["info"] == 2  # info describes every table and source


def run_out(*argv: str | Path) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        rc = main([str(a) for a in argv])
    return rc, out.getvalue()


def test_a_results_table_declared_larger_than_stored(results, tmp_path):
    path = copy_of(results, tmp_path)
    declared(path, "latency/rtt", 2**34)
    v_rc, got = agree(path, "results", when_damaged=("info", "report", "gui"))
    assert v_rc == 1 and got == {"info": 2, "report": 2, "gui": 2}


# -- attribute values at every documented bound ----------------------------------------------------------
def set_attr(path: Path, group: str, key: str, value: object) -> None:
    with h5py.File(path, "r+") as h5:
        h5[group].attrs[key] = value


def reverse_timestamps(path: Path) -> None:
    with h5py.File(path, "r+") as h5:
        ts = h5["sources/probe/timestamps_ps"]
        ts[...] = ts[()][::-1]


def swap_two_timestamps(path: Path) -> None:
    with h5py.File(path, "r+") as h5:
        ts = h5["sources/probe/timestamps_ps"]
        values = ts[()]
        mid = len(values) // 2
        values[mid], values[mid + 1] = values[mid + 1], values[mid] - 1
        ts[...] = values


S = "sources/send_pci"
#: (what is done, whether every reader must take it): each attribute at the bounds docs/formats.md gives, and
#: the combinations the timeline's 64 bits cannot carry.
CAPTURE_BOUNDS: list[tuple[str, Callable[[Path], None], bool]] = [
    ("offset_ps = 2**63-1", lambda p: set_attr(p, S, "offset_ps", np.int64(MAX)), False),
    ("offset_ps = -(2**63-1)", lambda p: set_attr(p, S, "offset_ps", np.int64(-MAX)), False),
    ("offset_ps = 2**62", lambda p: set_attr(p, S, "offset_ps", np.int64(2**62)), True),
    ("offset_ps = -2**62", lambda p: set_attr(p, S, "offset_ps", np.int64(-2**62)), True),
    ("offset_ps = 2**63 (past the bound)", lambda p: set_attr(p, S, "offset_ps", np.uint64(2**63)), False),
    ("trigger_sample = 0", lambda p: set_attr(p, S, "trigger_sample", np.int64(0)), True),
    ("trigger_sample = 2**62", lambda p: set_attr(p, S, "trigger_sample", np.int64(2**62)), False),
    ("trigger_sample = 2**63-1", lambda p: set_attr(p, S, "trigger_sample", np.int64(MAX)), False),
    ("state trigger_sample = 2**63-1", lambda p: set_attr(p, "sources/probe", "trigger_sample", np.int64(MAX)),
     True),
    ("trigger_sample = -1", lambda p: set_attr(p, S, "trigger_sample", np.int64(-1)), False),
    ("samplerate_hz = 1 THz", lambda p: set_attr(p, S, "samplerate_hz", 1e12), True),
    ("samplerate_hz = 1 mHz", lambda p: set_attr(p, S, "samplerate_hz", 1e-3), False),
    ("samplerate_hz = 2 THz", lambda p: set_attr(p, S, "samplerate_hz", 2e12), False),
    ("timestamps_ps reversed", reverse_timestamps, False),
    ("timestamps_ps decreasing once", swap_two_timestamps, False),
]


def sane_times(path: Path) -> None:
    """The decoded times of send_pci, freshly decoded: each transaction ends at or after its start, every time
    within the 64-bit timeline (a wrapped time shows as an end before its start, or the wrong sign)."""
    rc, out = run_out("events", path, "--source", "send_pci", "--decoder", "pci", "--json")
    assert rc == 0
    rows = [json.loads(line) for line in out.splitlines()]
    assert rows and all(r["t_end_ns"] >= r["t_ns"] for r in rows)
    assert all(abs(r["t_ns"]) <= MAX // 1000 for r in rows)


@pytest.mark.parametrize("what, change, taken", CAPTURE_BOUNDS, ids=[c[0] for c in CAPTURE_BOUNDS])
def test_capture_attributes_at_and_past_their_bounds(capture, tmp_path, what, change, taken):
    path = copy_of(capture, tmp_path)
    change(path)
    v_rc, got = agree(path, "capture", when_damaged=("decode",))
    if taken:
        assert v_rc == 0 and set(got.values()) == {0}, got
        sane_times(path)
    else:  # refused by name, never wrapped: decode reads every sample's time
        assert v_rc == 1 and got["decode"] == 2, got


R = "latency"
RESULTS_BOUNDS = [
    ("bin_width_us = 1e-6", f"{R}/histogram", "bin_width_us", 1e-6, True),
    ("bin_width_us = 1e9", f"{R}/histogram", "bin_width_us", 1e9, True),
    ("bin_width_us = 0", f"{R}/histogram", "bin_width_us", 0.0, False),
    ("at_size_bytes = -1", f"{R}/modes", "at_size_bytes", np.int64(-1), True),
    ("at_size_bytes = 2**31", f"{R}/modes", "at_size_bytes", np.int64(2**31), True),
    ("at_size_bytes = 2**31+1", f"{R}/modes", "at_size_bytes", np.int64(2**31 + 1), False),
]


@pytest.mark.parametrize("what, table, key, value, taken", RESULTS_BOUNDS, ids=[c[0] for c in RESULTS_BOUNDS])
def test_results_attributes_at_and_past_their_bounds(results, tmp_path, what, table, key, value, taken):
    path = copy_of(results, tmp_path)
    set_attr(path, table, key, value)
    v_rc, got = agree(path, "results", when_damaged=("report",))
    assert (v_rc, set(got.values())) == ((0, {0}) if taken else (1, {2})), got


STREAM_BOUNDS = [
    ("link_mbps = 1e-6", "stream/points", "link_mbps", 1e-6, True),
    ("link_mbps = 1e9", "stream/points", "link_mbps", 1e9, True),
    ("link_mbps = NaN (unknown)", "stream/points", "link_mbps", np.nan, True),
    ("link_mbps = inf", "stream/points", "link_mbps", np.inf, False),
    ("wire_overhead_bytes = 0", "stream/points", "wire_overhead_bytes", np.int64(0), True),
    ("wire_overhead_bytes = 65536", "stream/points", "wire_overhead_bytes", np.int64(1 << 16), True),
    ("wire_overhead_bytes = -1", "stream/points", "wire_overhead_bytes", np.int64(-1), False),
]


@pytest.mark.parametrize("what, table, key, value, taken", STREAM_BOUNDS, ids=[c[0] for c in STREAM_BOUNDS])
def test_stream_results_attributes_at_and_past_their_bounds(stream, tmp_path, what, table, key, value, taken):
    path = copy_of(stream, tmp_path)
    set_attr(path, f"results/{table}", key, value)
    v_rc, got = agree(path, "results", when_damaged=("report",))
    if taken:
        assert (v_rc, set(got.values())) == (0, {0}), got
    else:  # the report refuses it (info describes the set without analysing its results)
        assert v_rc == 1 and got["report"] == 2, got


# -- empty and one-row tables ----------------------------------------------------------------------------
def cut_tables(path: Path, rows: int, only: str | None = None) -> list[str]:
    """Keep the first ``rows`` rows of every table of ``path`` and its companion (or of table ``only``), written
    as nicrig writes tables (growable, chunked, checksummed); the tables cut."""
    cut = []
    for file in (path, companion_path(path)):
        if not file.exists():
            continue
        with h5py.File(file, "r+") as h5:
            names: list[str] = []
            h5.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) and o.dtype.names is not None
                          and not n.startswith("sources/") and (only is None or n == only) else None)
            for name in names:
                rewritten(h5, name, h5[name][:rows])
                cut.append(name)
    return cut


@pytest.mark.parametrize("which", ["capture", "results", "stream"])
@pytest.mark.parametrize("rows", [0, 1])
def test_every_table_empty_or_of_one_row(capture, results, stream, tmp_path, which, rows):
    src = {"capture": capture, "results": results, "stream": stream}[which]
    path = copy_of(src, tmp_path)
    assert cut_tables(path, rows)
    v_rc, got = agree(path, "results" if which == "results" else "capture")
    assert v_rc == 0 and set(got.values()) <= ({0, 1} if rows == 0 else {0}), got  # events: 1, "no rows"


@pytest.mark.parametrize("which, table", [("results", "latency/rtt"), ("capture", "results/latency/rtt")])
def test_an_empty_round_trip_table_alone(capture, results, tmp_path, which, table):
    """Report and gui on a latency run without a round trip (once an IndexError)."""
    path = copy_of(results if which == "results" else capture, tmp_path)
    assert cut_tables(path, 0, table) == [table]
    v_rc, got = agree(path, which)
    assert v_rc == 0 and set(got.values()) == {0}, got


def test_readers_cost_no_more_than_the_file_holds(capture, tmp_path):
    """A dataspace of 2**40 rows costs verify and info what the stored chunks cost (tracemalloc's peak), not
    what the dataspace says: neither reads nor allocates by the declared size."""
    import tracemalloc

    path = copy_of(capture, tmp_path)
    declared(path, "sources/send_pci/samples", 2**40)
    tracemalloc.start()
    for argv in (("verify", path), ("info", path)):
        run(*argv)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 20 * os.path.getsize(path), peak
