"""Damaged and hostile files: every command answers with one clear line, never a traceback or a different table.

Real small files (a simulated capture set, decoded; a latency results file)
are damaged the ways a disk, a copy or a hand edit damages them: bytes flipped
at random offsets, attributes given the wrong type, NaN or infinite rates, a
negative trigger sample, a member gone. Each command (info, decode, events,
report, export, import --append, gui --screenshot) must exit 0, 1 or 2 with no
traceback, and whenever decode says 0 its tables must be the clean file's:
damage is found (HDF5's metadata checksums, nicrig's Fletcher32 on every
chunk, the typed attribute checks at open), never decoded into a result.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import tempfile
from pathlib import Path

import h5py
import numpy as np
import pytest
from conftest import simulate_set
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nicrig.acquisition.capture import CaptureSet
from nicrig.udpmon.results import LatencyVisit, ResultsFile, write_latency

from nicrig.cli import main
from nicrig.errors import FormatError

FEW = settings(max_examples=4, deadline=None, derandomize=True,
               suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def run(*argv: str) -> tuple[int, str, str]:
    """``nicrig ARGV`` in this process: exit code, stdout, stderr. An exception escaping main fails the test."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(list(argv))
    return rc, out.getvalue(), err.getvalue()


def clean_line(rc: int, err: str, path: Path) -> None:
    """Exit 0/1/2, no traceback; a failure is one ``nicrig: error:`` line per problem naming the file."""
    assert rc in (0, 1, 2) and "Traceback" not in err
    if rc == 2:
        errors = [line for line in err.splitlines() if line.startswith("nicrig: error:")]
        assert errors and all(path.name in line for line in errors), err


def tables(path: Path) -> dict[str, bytes]:
    with CaptureSet.open(path) as cs:
        return {t: cs.read_table(t).tobytes() for t in cs.table_names() if t.startswith("decoded/")}


class Clean(tuple):
    """(path, its decoded tables), shown short in Hypothesis' reports."""

    def __repr__(self) -> str:
        return f"Clean({self[0]})"


@pytest.fixture(scope="module")
def capture(tmp_path_factory) -> Clean:
    folder = tmp_path_factory.mktemp("clean")
    path = simulate_set(folder, "cap", kind="stream", size_bytes=300, spacing_us=15, count=2)
    assert run("decode", str(path))[0] == 0
    return Clean((path, tables(path)))


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> Path:
    rng = np.random.default_rng(3)
    visits = [LatencyVisit(r, p, s, 0, 0, (20_000 + 12 * s + rng.normal(0, 300, 10)).astype(np.int64))
              for r in range(3) for p, s in enumerate((64, 512, 1024, 1472))]
    path = tmp_path_factory.mktemp("results") / "lat.h5"
    with ResultsFile.create(path) as rf:
        rf.set_run("latency", peer="127.0.0.1:5001", argv=["test"], settings={}, remote={})
        write_latency(rf, visits, mtu=1500, bin_us=1.0)
    return path


def flipped(src: Path, folder: Path, flips: list[tuple[float, int]]) -> Path:
    """A copy of ``src`` with the byte at each fractional offset XORed with a non-zero mask."""
    raw = bytearray(src.read_bytes())
    for where, mask in flips:
        raw[min(int(where * len(raw)), len(raw) - 1)] ^= mask
    out = folder / src.name
    out.write_bytes(bytes(raw))
    return out


FLIPS = st.lists(st.tuples(st.floats(0, 1, exclude_max=True), st.integers(1, 255)), min_size=1, max_size=3)


@FEW
@given(flips=FLIPS)
def test_flipped_bytes_in_a_capture_set(capture, flips):
    clean, clean_tables = capture
    with tempfile.TemporaryDirectory() as tmp:
        path = flipped(clean, Path(tmp), flips)
        for argv in (("info", str(path), "--json"), ("events", str(path), "--source", "send_pci", "--decoder", "pci", "--limit", "5"),
                     ("export", str(path), "--source", "send_pci", "-o", str(Path(tmp) / "x.vcd"))):
            rc, _, err = run(*argv)
            clean_line(rc, err, path)
        rc, _, err = run("decode", str(path), "--force")
        clean_line(rc, err, path)
        if rc == 0:  # the damage is where decode does not read (a truth table, say): never a silently
            try:         # different table, though reading the damaged part later may fail, by name
                assert tables(path) == clean_tables
            except FormatError as exc:
                assert str(exc).startswith(f"{path}: ") and "damaged file" in str(exc)


@FEW
@given(flips=FLIPS)
def test_flipped_bytes_in_a_results_file(results, flips):
    with tempfile.TemporaryDirectory() as tmp:
        path = flipped(results, Path(tmp), flips)
        rc, _, err = run("info", str(path), "--json")
        clean_line(rc, err, path)
        rc, out, err = run("report", str(path), "-o", "-", "--format", "json")
        assert rc in (0, 1, 2) and "Traceback" not in err


SOURCE = "sources/send_pci"
TAMPERING = [
    (SOURCE, "samplerate_hz", np.nan, "samplerate_hz"),
    (SOURCE, "samplerate_hz", np.inf, "samplerate_hz"),
    (SOURCE, "samplerate_hz", "fast", "not a number"),
    (SOURCE, "trigger_sample", np.int64(-5), "trigger_sample"),
    (SOURCE, "trigger_sample", 2.5, "not a whole number"),
    (SOURCE, "offset_ps", "soon", "not a whole number"),
    (SOURCE, "mode", np.int64(3), "not text"),
    (SOURCE, "channels", np.int64(7), "channel names"),
    (SOURCE, "roles", "{not json", "not JSON"),
    (SOURCE, "roles", json.dumps({"frame": 5}), "not what nicrig writes"),
    (SOURCE, "vectors", json.dumps({"AD": ["nope"]}), "does not have"),
    (SOURCE, "vectors", json.dumps({"X": []}), "not what its channels' names make"),  # a vector of no bits
    (SOURCE, "roles", json.dumps({"frame": "NOPE#"}), "roles name channels it does not have"),
    (SOURCE, "bus", json.dumps([1, 2]), "not what nicrig writes"),
    ("", "format_version", "three", "not a whole number"),
    ("", "format", np.float64(1.5), "not text"),
    (SOURCE, None, "samples", "no 'samples' dataset"),
]


def tampered(src: Path, folder: Path, group: str, key: str | None, value) -> Path:
    path = folder / src.name
    shutil.copy(src, path)
    with h5py.File(path, "r+") as h5:
        if key is None:
            del h5[group][value]
        else:
            h5[group or "/"].attrs[key] = value
    return path


@settings(max_examples=len(TAMPERING), deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(case=st.sampled_from(TAMPERING))
def test_attributes_of_the_wrong_type_or_range(capture, case):
    group, key, value, said = case
    with tempfile.TemporaryDirectory() as tmp:
        path = tampered(capture[0], Path(tmp), group, key, value)
        commands = [("info", str(path)), ("decode", str(path), "--force")]
        if key in ("samplerate_hz", "roles"):  # the readers of decoded tables and results see the same checks
            commands += [("events", str(path), "--source", "send_pci", "--decoder", "pci"),
                         ("report", str(path), "-o", str(Path(tmp) / "r.json"))]
        for argv in commands:
            rc, _, err = run(*argv)
            assert rc == 2 and "Traceback" not in err, (argv, err)
            first = err.splitlines()[0]  # report adds a summary line of its own after the files' lines
            assert first.startswith("nicrig: error:") and str(path) in first and said in first, (argv, err)
        with pytest.raises(FormatError, match=said):
            CaptureSet.open(path)


def test_import_append_into_a_damaged_set_and_gui_screenshot(capture, tmp_path):
    path = tampered(capture[0], tmp_path, SOURCE, "samplerate_hz", np.inf)
    vcd = tmp_path / "extra.vcd"
    vcd.write_text("$timescale 1 ns $end\n$scope module top $end\n$var wire 1 ! a $end\n$upscope $end\n"
                   "$enddefinitions $end\n#0\n0!\n#10\n1!\n")
    before = path.read_bytes()
    rc, _, err = run("import", str(vcd), "-o", str(path), "--append")
    assert rc == 2 and "Traceback" not in err and "samplerate_hz" in err and str(path) in err
    assert path.read_bytes() == before  # nothing written into the damaged set
    rc, _, err = run("gui", str(path), "--screenshot", str(tmp_path / "shot.png"))
    assert rc == 2 and "Traceback" not in err and "samplerate_hz" in err
    assert not (tmp_path / "shot.png").exists()


def test_a_checksum_failure_is_named_and_never_decoded(capture, tmp_path):
    clean, _ = capture
    path = tmp_path / "chunk.h5"
    shutil.copy(clean, path)
    with h5py.File(path, "r") as h5:
        ds = h5[f"{SOURCE}/samples"]
        offset, size = ds.id.get_chunk_info(0).byte_offset, ds.id.get_chunk_info(0).size
    raw = bytearray(path.read_bytes())
    raw[offset + size // 2] ^= 0x10  # one bit inside the first stored chunk of the samples
    path.write_bytes(bytes(raw))
    rc, _, err = run("decode", str(path), "--force")
    assert rc == 2 and "checksum fails" in err and f"source 'send_pci' samples 0.." in err and str(path) in err


def test_every_batch_mode_goes_on_past_a_damaged_file(capture, tmp_path):
    clean, clean_tables = capture
    files = []
    for k, name in enumerate(("a.h5", "bad.h5", "c.h5")):
        files.append(tmp_path / name)
        shutil.copy(clean, files[-1])
    tampered(clean, tmp_path, SOURCE, "trigger_sample", np.int64(-1)).rename(files[1])
    for extra in ((), ("--workers", "2")):
        rc, _, err = run("decode", *map(str, files), "--force", *extra)
        assert rc == 1 and "Traceback" not in err and err.count("nicrig: error:") == 1
        assert err.startswith(f"nicrig: error: {files[1]}: source 'send_pci'") and err.count(str(files[1])) == 1
        assert tables(files[0]) == tables(files[2]) == clean_tables
    rc, _, err = run("report", *map(str, files), "-o", str(tmp_path / "r.json"))
    assert rc == 1 and "Traceback" not in err and err.count("nicrig: error:") == 1 and "bad.h5" in err
