"""sigrok session files (nicrig.acquisition.srzip): round trips, the real sigrok-cli as a peer, damaged files."""

from __future__ import annotations

import configparser
import shutil
import subprocess
import zipfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from nicrig.acquisition import srzip
from nicrig.acquisition.capture import pack_bits, unitsize_for, unpack_bits
from nicrig.acquisition.srzip import _parse_rate, read_sr, write_sr

from nicrig.errors import FormatError, UsageError

SIGROK = shutil.which("sigrok-cli")


def needs_sigrok(fn):
    """Runs the real sigrok-cli (Debian package sigrok-cli; ``make test`` installs it)."""
    fn = pytest.mark.skipif(SIGROK is None, reason="sigrok-cli not installed")(fn)
    return pytest.mark.sigrok(fn)

PCI_NAMES = ["FRAME#", "IRDY#", "TRDY#", "DEVSEL#"] + [f"AD[{i}]" for i in range(8)] + ["C/BE#[0]"]


def sigrok(*args: str) -> str:
    out = subprocess.run([SIGROK, *args], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout


def pattern_bits(n: int, nch: int) -> np.ndarray:
    """A small pattern a human can check: channel k toggles every 2**(k % 5) samples, shifted by k // 5."""
    i = np.arange(n)[:, None]
    k = np.arange(nch)[None, :]
    return (((i + k // 5) >> (k % 5)) & 1).astype(np.uint8)


def zip_with(path: Path, members: dict[str, bytes | str]) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return path


def meta(**over: str) -> str:
    fields = {"capturefile": "logic-1", "total probes": "2", "samplerate": "1 MHz", "total analog": "0",
              "probe1": "A", "probe2": "B", "unitsize": "1"}
    fields.update({k.replace("_", " "): v for k, v in over.items()})
    return "[global]\nsigrok version=0.5.1\n\n[device 1]\n" + "".join(f"{k}={v}\n" for k, v in fields.items() if v is not None)


# ---------------------------------------------------------------------------------------------
# our own round trip
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("nch", [1, 8, 9, 13, 90])
def test_roundtrip(tmp_path, nch):
    names = PCI_NAMES[:nch] if nch <= len(PCI_NAMES) else [f"D{i}" for i in range(nch)]
    bits = pattern_bits(1000, nch)
    packed = pack_bits(bits)
    p = tmp_path / "x.sr"
    assert write_sr(p, names, 66_666_667, [packed[:300], packed[300:301], packed[301:301], packed[301:]]) == 1000
    s = read_sr(p)
    assert s.channels == names and s.samplerate_hz == 66_666_667
    assert s.samples.dtype == np.uint8 and s.samples.shape == (1000, unitsize_for(nch))
    assert np.array_equal(s.samples, packed)
    assert np.array_equal(unpack_bits(s.samples, nch), bits)


def test_layout_of_the_archive(tmp_path):
    p = tmp_path / "x.sr"
    write_sr(p, PCI_NAMES, 33.333333e6, [pack_bits(pattern_bits(10, len(PCI_NAMES)))])
    with zipfile.ZipFile(p) as zf:
        assert zf.namelist() == ["version", "metadata", "logic-1-1"]
        assert zf.read("version") == b"2"
        assert len(zf.read("logic-1-1")) == 10 * 2
        cfg = configparser.ConfigParser(interpolation=None)
        cfg.read_string(zf.read("metadata").decode())
    dev = cfg["device 1"]
    assert dev["capturefile"] == "logic-1" and dev["total probes"] == str(len(PCI_NAMES))
    assert dev["samplerate"] == "33333333 Hz" and dev["unitsize"] == "2" and dev["total analog"] == "0"
    assert [dev[f"probe{i + 1}"] for i in range(len(PCI_NAMES))] == PCI_NAMES


def test_empty_capture(tmp_path):
    p = tmp_path / "e.sr"
    assert write_sr(p, ["A", "B"], 1e6, []) == 0
    with zipfile.ZipFile(p) as zf:
        assert zf.read("logic-1-1") == b""
    s = read_sr(p)
    assert s.samples.shape == (0, 1) and s.channels == ["A", "B"]


def test_large_capture_is_split_into_whole_samples(tmp_path, monkeypatch):
    monkeypatch.setattr(srzip, "CHUNK_BYTES", 1000)           # 4 MiB in real life
    rng = np.random.default_rng(0)
    packed = rng.integers(0, 256, (7000, 3), dtype=np.uint8)
    packed[:, 2] &= 0x0F                                        # 20 channels: top 4 bits unused
    p = tmp_path / "big.sr"
    blocks = [packed[a:a + 777] for a in range(0, 7000, 777)]
    assert write_sr(p, [f"D{i}" for i in range(20)], 1e6, blocks) == 7000
    with zipfile.ZipFile(p) as zf:
        parts = [n for n in zf.namelist() if n.startswith("logic-1-")]
        sizes = [zf.getinfo(n).file_size for n in parts]
    assert len(parts) == 22 and parts[9] == "logic-1-10"       # past 9: order must be numeric
    assert all(s == 999 for s in sizes[:-1]) and sum(sizes) == 21_000
    assert np.array_equal(read_sr(p).samples, packed)


def test_write_validation(tmp_path):
    with pytest.raises(UsageError, match="at least one channel"):
        write_sr(tmp_path / "a.sr", [], 1e6, [])
    with pytest.raises(UsageError, match=r"\(n, 2\)"):
        write_sr(tmp_path / "b.sr", [f"D{i}" for i in range(9)], 1e6, [np.zeros((4, 1), np.uint8)])


@pytest.mark.parametrize("text, hz", [("66666667 Hz", 66_666_667), ("1 MHz", 1e6), ("200 kHz", 200e3),
                                      ("1.5 GHz", 1.5e9), ("500", 500), ("133.33 MHz", 133.33e6)])
def test_parse_rate(text, hz):
    assert _parse_rate(text) == pytest.approx(hz)


@settings(max_examples=30, deadline=None)
@given(nch=st.integers(1, 70), n=st.integers(0, 200), seed=st.integers(0, 2**32 - 1))
def test_roundtrip_property(tmp_path_factory, nch, n, seed):
    rng = np.random.default_rng(seed)
    bits = rng.integers(0, 2, (n, nch), dtype=np.uint8)
    p = tmp_path_factory.mktemp("sr") / "p.sr"
    write_sr(p, [f"L{i}" for i in range(nch)], 125e6, [pack_bits(bits)])
    s = read_sr(p)
    assert np.array_equal(unpack_bits(s.samples, nch), bits) and s.samplerate_hz == 125e6


# ---------------------------------------------------------------------------------------------
# damaged and foreign files
# ---------------------------------------------------------------------------------------------
def _expect(p: Path, fragment: str) -> None:
    with pytest.raises(FormatError) as ei:
        read_sr(p)
    assert str(p) in str(ei.value) and fragment in str(ei.value), str(ei.value)


def test_not_a_zip(tmp_path):
    p = tmp_path / "x.sr"
    p.write_bytes(b"not a zip at all\n" * 20)
    _expect(p, "not a sigrok session file")
    _expect(tmp_path / "missing.sr", "not a sigrok session file")


def test_truncated_zip(tmp_path):
    p = tmp_path / "t.sr"
    write_sr(p, ["A"], 1e6, [np.zeros((5000, 1), np.uint8)])
    data = p.read_bytes()
    p.write_bytes(data[: len(data) // 2])
    _expect(p, "not a sigrok session file")


def test_damaged_member(tmp_path):
    p = tmp_path / "d.sr"
    rng = np.random.default_rng(1)
    write_sr(p, ["A", "B"], 1e6, [rng.integers(0, 4, (20000, 1), dtype=np.uint8)])
    with zipfile.ZipFile(p) as zf:
        info = zf.getinfo("logic-1-1")
    raw = bytearray(p.read_bytes())
    start = info.header_offset + 30 + len(info.filename)
    raw[start + 10:start + 40] = bytes(30)                      # scribble over the deflated samples
    p.write_bytes(bytes(raw))
    _expect(p, "logic-1-1")


def test_missing_metadata(tmp_path):
    _expect(zip_with(tmp_path / "m.sr", {"version": "2", "logic-1-1": b"\0\0"}), "no 'metadata'")


@pytest.mark.parametrize("version", ["1", "3", None])
def test_wrong_or_missing_version(tmp_path, version):
    members: dict[str, bytes | str] = {"metadata": meta(), "logic-1-1": b"\0"}
    if version is not None:
        members["version"] = version
    _expect(zip_with(tmp_path / "v.sr", members), "nicrig reads version 2")


@pytest.mark.parametrize("metadata, fragment", [
    ("[global]\nsigrok version=0.5.1\n", "no [device] section"),
    (meta(total_probes="0"), "no logic channels"),
    (meta(total_probes="two"), "bad metadata value"),
    (meta(unitsize="x"), "bad metadata value"),
    (meta(unitsize="0"), "bad unitsize"),
    (meta(samplerate="fast"), "bad metadata value"),
    (meta(total_probes="9"), "unitsize 1 too small for 9 channels"),
    ("this is not an ini file", "metadata"),
])
def test_bad_metadata(tmp_path, metadata, fragment):
    _expect(zip_with(tmp_path / "b.sr", {"version": "2", "metadata": metadata, "logic-1-1": b"\0\0"}), fragment)


def test_partial_sample(tmp_path):
    p = zip_with(tmp_path / "p.sr", {"version": "2", "metadata": meta(unitsize="2"), "logic-1-1": b"\0\0\0"})
    _expect(p, "not a whole number of 2-byte samples")


def test_reads_sigrok_conventions(tmp_path):
    # missing probe names default to D<i> (sigrok omits disabled channels); extra unitsize bytes are dropped
    md = meta(probe2=None, unitsize="2")
    s = read_sr(zip_with(tmp_path / "c.sr", {"version": "2", "metadata": md, "logic-1-1": b"\x01\xff\x02\xff",
                                             "logic-1-x": b"\x07\x07"}))   # not a sample chunk
    assert s.channels == ["A", "D1"] and s.samples.tolist() == [[1], [2]] and s.samplerate_hz == 1e6


# ---------------------------------------------------------------------------------------------
# the real sigrok-cli as a peer
# ---------------------------------------------------------------------------------------------
def parse_bits(text: str) -> dict[str, str]:
    """``sigrok-cli -O bits`` output: ``NAME:0101 0101 ...`` lines, repeated per block of samples."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        if ":" not in line or line.startswith("libsigrok") or line.startswith("Acquisition"):
            continue
        name, _, bits = line.rpartition(":")
        out[name] = out.get(name, "") + bits.replace(" ", "")
    return out


@needs_sigrok
def test_sigrok_cli_show_lists_channels_and_rate(tmp_path):
    p = tmp_path / "show.sr"
    write_sr(p, PCI_NAMES, 66_666_667, [pack_bits(pattern_bits(123, len(PCI_NAMES)))])
    out = sigrok("-i", str(p), "--show")
    assert "Samplerate: 66666667" in out
    assert f"Channels: {len(PCI_NAMES)}" in out
    for name in PCI_NAMES:
        assert f"- {name}: logic" in out
    assert "Logic unitsize: 2" in out and "Logic sample count: 123" in out


@needs_sigrok
def test_sigrok_cli_bits_reproduce_the_channels(tmp_path):
    n = 40
    bits = pattern_bits(n, len(PCI_NAMES))
    p = tmp_path / "bits.sr"
    write_sr(p, PCI_NAMES, 1e6, [pack_bits(bits)])
    got = parse_bits(sigrok("-i", str(p), "-O", "bits"))
    assert list(got) == PCI_NAMES
    for k, name in enumerate(PCI_NAMES):
        assert got[name] == "".join(map(str, bits[:, k])), name


@needs_sigrok
def test_sigrok_cli_csv_reproduces_90_channels(tmp_path):
    rng = np.random.default_rng(7)
    names = [f"AD[{i}]" for i in range(64)] + [f"C/BE#[{i}]" for i in range(8)] + [f"S{i}" for i in range(18)]
    bits = rng.integers(0, 2, (500, 90), dtype=np.uint8)
    p = tmp_path / "csv.sr"
    write_sr(p, names, 250e6, [pack_bits(bits)])
    out = sigrok("-i", str(p), "-O", "csv")
    header = next(line for line in out.splitlines() if line.startswith("; Channels"))
    assert header.endswith(", ".join(names))
    rows = [line for line in out.splitlines() if line and not line.startswith(";") and not line.startswith("logic")]
    got = np.array([[int(v) for v in r.split(",")] for r in rows], dtype=np.uint8)
    assert np.array_equal(got, bits)


@needs_sigrok
def test_files_sigrok_writes_are_read(tmp_path):
    # sigrok-cli re-saves our file with its own writer (and its own chunking): we read it back equal
    rng = np.random.default_rng(8)
    packed = rng.integers(0, 256, (3000, 2), dtype=np.uint8)
    packed[:, 1] &= 0x1F                                       # 13 channels
    ours, theirs = tmp_path / "ours.sr", tmp_path / "theirs.sr"
    write_sr(ours, PCI_NAMES, 2e6, [packed])
    sigrok("-i", str(ours), "-o", str(theirs))
    s = read_sr(theirs)
    assert s.channels == PCI_NAMES and s.samplerate_hz == 2e6 and np.array_equal(s.samples, packed)
    # and a capture from sigrok's demo device
    demo = tmp_path / "demo.sr"
    sigrok("-d", "demo", "--channels", "D0,D1,D2,D3,D4,D5,D6,D7", "--samples", "100",
           "--config", "samplerate=1M", "-o", str(demo))
    s = read_sr(demo)
    assert s.channels == [f"D{i}" for i in range(8)] and s.samplerate_hz == 1e6 and s.samples.shape == (100, 1)
    csv = [r for r in sigrok("-i", str(demo), "-O", "csv").splitlines()
           if r and not r.startswith(";") and not r.startswith("logic")]
    assert np.array_equal(unpack_bits(s.samples, 8), np.array([[int(v) for v in r.split(",")] for r in csv]))
