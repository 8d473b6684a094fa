"""Fletcher32 on every dataset and ``nicrig verify``: flipped bytes in a chunk are found and named by rows."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
from conftest import as_written_by_older_nicrig, copy_capture, simulate_set
from nicrig.acquisition.capture import CaptureSet, SourceSpec
from nicrig.companion import companion_path
from nicrig.decoders.batch import decode_files


def nicrig(*args: str | Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "nicrig", *map(str, args)], capture_output=True, text=True,
                          env=env)


@pytest.fixture(scope="module")
def decoded(tmp_path_factory) -> Path:
    """A simulated capture set, decoded: sources of several chunks, truth and decoded tables."""
    folder = tmp_path_factory.mktemp("verify")
    path = simulate_set(folder, "cap", kind="stream", size_bytes=1000, count=40)
    (result,) = decode_files([path])
    assert result.error is None, result.error
    return path


def _datasets(path: Path) -> dict[str, h5py.Dataset]:
    out: dict[str, tuple] = {}
    with h5py.File(path, "r") as h5:
        h5.visititems(lambda n, o: out.__setitem__(n, (o.fletcher32, o.chunks, o.shape))
                      if isinstance(o, h5py.Dataset) else None)
    return out


def _flip_in_chunk(path: Path, dataset: str, index: int) -> tuple[int, int]:
    """Flip bytes in the middle of stored chunk ``index`` of ``dataset``; its first and stop row."""
    with h5py.File(path, "r") as h5:
        ds = h5[dataset]
        info = ds.id.get_chunk_info(index)
        first = info.chunk_offset[0]
        stop = min(first + ds.chunks[0], ds.shape[0])
    with open(path, "r+b") as f:
        at = info.byte_offset + info.size // 2
        f.seek(at)
        b = f.read(3)
        f.seek(at)
        f.write(bytes(x ^ 0x5A for x in b))
    return first, stop


def test_every_dataset_carries_a_checksum(decoded):
    found = {**_datasets(decoded), **_datasets(companion_path(decoded))}
    assert any(n.startswith("decoded/") for n in found) and any(n.startswith("truth/") for n in found)
    assert all(f for f, _, _ in found.values()), [n for n, (f, _, _) in found.items() if not f]


def test_clean_file_passes(decoded):
    r = nicrig("verify", decoded)
    assert r.returncode == 0, r.stdout + r.stderr
    derived = companion_path(decoded)
    assert f"{decoded}: ok" in r.stdout and f"{derived}: ok" in r.stdout and "no checksum" not in r.stdout
    doc = json.loads(nicrig("verify", "--json", decoded).stdout)
    assert [f["path"] for f in doc["files"]] == [str(decoded), str(derived)]
    for f, path in zip(doc["files"], (decoded, derived)):
        assert f["status"] == "ok" and f["damage"] == [] and f["unchecked"] == []
        assert f["datasets"] == len(_datasets(path)) and f["chunks"] >= f["datasets"]


def test_progress_off_a_terminal_counts_the_chunks_of_each_file(decoded):
    """As every long command: with standard error a pipe, a line per step (``NICRIG_PROGRESS_S=0``)."""
    r = nicrig("verify", "--json", decoded, env=dict(os.environ, NICRIG_PROGRESS_S="0"))
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)   # the data alone on standard output
    for f in doc["files"]:
        label = f"nicrig verify: {Path(f['path']).name}: "
        last = [line for line in r.stderr.splitlines() if line.startswith(label)][-1]
        assert last.startswith(f"{label}{f['chunks']:,} of {f['chunks']:,} chunks (100%), "), last


@pytest.mark.parametrize("dataset, unit", [("sources/send_pci/samples", "sample"),
                                           ("decoded/send_pci/pci", "row")])
def test_flipped_bytes_in_a_chunk_are_named_by_dataset_and_rows(decoded, tmp_path, dataset, unit):
    cap = copy_capture(decoded, tmp_path / "cap.h5")
    path = companion_path(cap) if dataset.startswith("decoded/") else cap
    with h5py.File(path, "r") as h5:
        ds = h5[dataset]
        before = ds[()]
        chunks = ds.id.get_num_chunks()
    index = chunks // 2
    first, stop = _flip_in_chunk(path, dataset, index)
    r = nicrig("verify", cap)
    assert r.returncode == 1, r.stdout + r.stderr
    span = f"{unit}s {first}-{stop - 1}" if stop - first > 1 else f"{unit} {first}"
    assert f"{path}: DAMAGED" in r.stdout and f"{dataset}: {span} unreadable" in r.stdout, r.stdout
    files = json.loads(nicrig("verify", "--json", cap).stdout)["files"]
    assert [f["status"] for f in files] == ["ok", "damaged"] if path != cap else ["damaged", "ok"]
    (f,) = [f for f in files if f["path"] == str(path)]
    assert [(d["dataset"], d["unit"], d["first"], d["stop"]) for d in f["damage"]] == [(dataset, unit, first, stop)]
    # the checksum makes the damaged chunk fail to read; every other row still reads as written
    with h5py.File(path, "r") as h5:
        ds = h5[dataset]
        with pytest.raises(OSError):
            ds[first:stop]
        if first:
            assert np.array_equal(ds[:first], before[:first])
        assert np.array_equal(ds[stop:], before[stop:])


def test_several_files_one_damaged_one_unreadable(decoded, tmp_path):
    bad = tmp_path / "bad.h5"
    shutil.copy(decoded, bad)
    _flip_in_chunk(bad, "sources/recv_pci/samples", 0)
    text = tmp_path / "text.h5"
    text.write_text("not HDF5\n")
    r = nicrig("verify", decoded, bad)
    assert r.returncode == 1
    assert f"{decoded}: ok" in r.stdout and f"{bad}: DAMAGED" in r.stdout
    r = nicrig("verify", "--json", decoded, bad, text)
    assert r.returncode == 2
    status = {Path(f["path"]).name: f["status"] for f in json.loads(r.stdout)["files"]}
    assert status == {"cap.h5": "ok", "cap.derived.h5": "ok", "bad.h5": "damaged", "text.h5": "unreadable"}
    r = nicrig("verify", tmp_path / "missing.h5")
    assert r.returncode == 2 and "no such file" in r.stdout and "Traceback" not in r.stderr


def test_files_without_checksums_open_and_say_so(decoded, tmp_path):
    old = copy_capture(decoded, tmp_path / "old.h5")
    as_written_by_older_nicrig(old)
    assert not any(f for f, _, _ in _datasets(old).values()) and "decoded/send_pci/pci" in _datasets(old)
    with CaptureSet.open(old) as cs, CaptureSet.open(decoded) as new:
        assert cs.source_names == new.source_names
        assert np.array_equal(cs.source("send_pci").read_packed(), new.source("send_pci").read_packed())
        assert np.array_equal(cs.read_table("decoded/send_pci/pci"), new.read_table("decoded/send_pci/pci"))
    r = nicrig("info", old)
    assert r.returncode == 0, r.stderr
    n = len(_datasets(old))
    assert f"checksum none on {n} of {n} datasets" in r.stdout
    info = json.loads(nicrig("info", "--json", old).stdout)
    assert len(info["checksums"]["unchecked"]) == n
    assert "Fletcher32 on every dataset" in nicrig("info", decoded).stdout
    r = nicrig("verify", old)
    assert r.returncode == 0 and f"no checksum on {n} dataset(s)" in r.stdout


def test_empty_tables_and_sources_are_checksummed(tmp_path):
    p = tmp_path / "e.h5"
    with CaptureSet.create(p) as cs:
        cs.add_source(SourceSpec("s", ["A"], mode="state"))
        cs.write_table("truth/none", np.zeros(0, [("a", "<u8")]))
    assert all(f for f, _, _ in _datasets(p).values())
    r = nicrig("verify", p)
    assert r.returncode == 0 and "3 datasets" in r.stdout
