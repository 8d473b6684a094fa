"""Capture sets (nicrig.acquisition.capture): layout, round trips, timeline, laziness, atomicity, validation."""

from __future__ import annotations

import io
import json
import os
import re
import stat
import sys
import tempfile
import tracemalloc
from pathlib import Path

import h5py
import numpy as np
import pytest
from conftest import run_unprivileged
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nicrig.acquisition import capture
from nicrig.acquisition.capture import (
    DEFAULT_CHUNK_SAMPLES,
    FORMAT_NAME,
    FORMAT_VERSION,
    CaptureSet,
    Source,
    SourceSpec,
    pack_bits,
    unitsize_for,
    unpack_bits,
    vectors_from_names,
)

from nicrig.errors import FormatError, NicrigError, UsageError

# A 64-bit PCI(-X) bus as a logic analyzer pod sees it: 18 single lines + AD[63:0] + C/BE#[7:0] = 90.
PCI_SINGLES = ["FRAME#", "IRDY#", "TRDY#", "DEVSEL#", "STOP#", "IDSEL", "PAR", "PAR64", "REQ64#",
               "ACK64#", "REQ#", "GNT#", "INTA#", "INTB#", "INTC#", "INTD#", "PERR#", "SERR#"]
PCI90 = PCI_SINGLES + [f"AD[{i}]" for i in range(64)] + [f"C/BE#[{i}]" for i in range(8)]
assert len(PCI90) == 90


def rand_bits(rng: np.random.Generator, n: int, nch: int) -> np.ndarray:
    return rng.integers(0, 2, size=(n, nch), dtype=np.uint8)


def vector_value(bits: np.ndarray, channels: list[str], name: str) -> np.ndarray:
    """Reference decoding of vector ``name`` straight from the 0/1 matrix."""
    out = np.zeros(bits.shape[0], dtype=np.uint64)
    for k, ch in enumerate(channels):
        if ch.startswith(name + "["):
            weight = int(ch[len(name) + 1:-1])
            out |= bits[:, k].astype(np.uint64) << np.uint64(weight)
    return out


def write_set(path: Path, *specs_and_data, notes: str = "", chunk_samples: int = DEFAULT_CHUNK_SAMPLES) -> None:
    """Write ``(spec, packed, timestamps_or_None)`` triples into a new capture set."""
    with CaptureSet.create(path, notes=notes) as cs:
        for spec, packed, ts in specs_and_data:
            cs.add_source(spec, chunk_samples=chunk_samples).append(packed, ts)


# ---------------------------------------------------------------------------------------------
# packing and channel geometry
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("n, unit", [(0, 1), (1, 1), (8, 1), (9, 2), (16, 2), (17, 3), (64, 8), (90, 12)])
def test_unitsize_for(n, unit):
    assert unitsize_for(n) == unit


def test_pack_bits_is_sigrok_layout():
    # channel k = bit k % 8 of byte k // 8
    bits = np.zeros((3, 90), np.uint8)
    bits[0, 0] = 1          # byte 0 bit 0
    bits[1, 9] = 1          # byte 1 bit 1
    bits[2, 89] = 1         # byte 11 bit 1
    bits[2, 7] = 1          # byte 0 bit 7
    packed = pack_bits(bits)
    assert packed.shape == (3, 12) and packed.dtype == np.uint8
    assert packed[0].tolist() == [1] + [0] * 11
    assert packed[1].tolist() == [0, 2] + [0] * 10
    assert packed[2].tolist() == [0x80] + [0] * 10 + [2]


@given(st.integers(1, 140), st.integers(0, 60), st.integers(0, 2**32 - 1))
def test_pack_unpack_inverse(nch, n, seed):
    rng = np.random.default_rng(seed)
    bits = rand_bits(rng, n, nch)
    packed = pack_bits(bits)
    assert packed.shape == (n, unitsize_for(nch))
    assert np.array_equal(unpack_bits(packed, nch), bits)
    # and the other way round, for packed samples whose unused high bits are zero
    raw = rng.integers(0, 256, size=(n, unitsize_for(nch)), dtype=np.uint8)
    if nch % 8:
        raw[:, -1] &= (1 << (nch % 8)) - 1
    assert np.array_equal(pack_bits(unpack_bits(raw, nch)), raw)


def test_vectors_from_names_orders_bits_and_rejects_gaps():
    assert vectors_from_names(["FRAME#", "AD[1]", "AD[0]", "C/BE#[0]"]) == {
        "AD": ["AD[0]", "AD[1]"], "C/BE#": ["C/BE#[0]"]}
    assert vectors_from_names(["FRAME#", "IRDY#"]) == {}
    with pytest.raises(UsageError, match=r"AD.*\[1\]"):
        vectors_from_names(["AD[0]", "AD[2]"])


# ---------------------------------------------------------------------------------------------
# round trips
# ---------------------------------------------------------------------------------------------
def test_roundtrip_timing_90_channels(tmp_path):
    rng = np.random.default_rng(1)
    bits = rand_bits(rng, 5000, 90)
    spec = SourceSpec(
        "send_pci", PCI90, mode="timing", samplerate_hz=400e6, trigger_sample=123, offset_ps=-2500,
        bus={"kind": "pci", "width_bits": 64, "clock_hz": 66.67e6, "bars": [[0xFE000000, 0x20000]]},
        roles={"frame": "FRAME#", "irdy": "IRDY#", "ad": "AD", "cbe": "C/BE#"},
        instrument={"model": "HP 16700", "pod": "A1-A6"}, notes="bench 2")
    p = tmp_path / "cs.h5"
    write_set(p, (spec, pack_bits(bits), None), notes="run 7")

    with CaptureSet.open(p) as cs:
        assert cs.notes == "run 7"
        assert cs.attrs["format"] == FORMAT_NAME and int(cs.attrs["format_version"]) == FORMAT_VERSION
        assert cs.source_names == ["send_pci"]
        s = cs.source("send_pci")
        assert (s.mode, s.samplerate_hz, s.trigger_sample, s.offset_ps) == ("timing", 400e6, 123, -2500)
        assert s.channels == PCI90 and s.unitsize == 12 and len(s) == s.num_samples == 5000
        assert s.bus == spec.bus and s.roles == spec.roles and s.instrument == spec.instrument
        assert s.notes == "bench 2"
        assert s.vectors == {"AD": [f"AD[{i}]" for i in range(64)], "C/BE#": [f"C/BE#[{i}]" for i in range(8)]}
        assert np.array_equal(s.read_packed(), pack_bits(bits))
        assert np.array_equal(unpack_bits(s.read_packed(), 90), bits)
        for k, ch in enumerate(PCI90):
            col = s.read_channel(ch)
            assert col.dtype == np.uint8 and np.array_equal(col, bits[:, k]), ch
            assert s.channel_index(ch) == k
        assert np.array_equal(s.read_channel("PERR#", 100, 200), bits[100:200, PCI90.index("PERR#")])
        assert np.array_equal(s.read_vector("AD"), vector_value(bits, PCI90, "AD"))
        assert np.array_equal(s.read_vector("C/BE#", 10, 20), vector_value(bits, PCI90, "C/BE#")[10:20])
        assert s.role("frame") == "FRAME#" and s.role("ad") == "AD" and s.role("stop") is None
        with pytest.raises(UsageError, match="no channel"):
            s.read_channel("NOPE#")
        with pytest.raises(UsageError, match="no vector"):
            s.read_vector("DATA")


def test_read_vector_whole_32bit_values(tmp_path):
    # AD[31:0] spread over the pod in a scrambled order, after a few single lines
    rng = np.random.default_rng(2)
    ad = [f"AD[{i}]" for i in range(32)]
    order = list(rng.permutation(32))
    channels = ["FRAME#", "IRDY#", "CLK"] + [ad[i] for i in order] + ["C/BE#[0]", "C/BE#[1]", "C/BE#[2]", "C/BE#[3]"]
    values = np.array([0, 1, 0xDEADBEEF, 0xFFFFFFFF, 0x80000000, 0x12345678, 0xFE000010], dtype=np.uint64)
    bits = np.zeros((len(values), len(channels)), np.uint8)
    for k, ch in enumerate(channels):
        if ch.startswith("AD["):
            bits[:, k] = (values >> np.uint64(int(ch[3:-1]))) & np.uint64(1)
    bits[:, channels.index("C/BE#[1]")] = 1        # C/BE# = 0b0010
    spec = SourceSpec("recv_pci", channels, samplerate_hz=250e6, roles={"ad": "AD"})
    p = tmp_path / "v.h5"
    write_set(p, (spec, pack_bits(bits), None))
    with CaptureSet.open(p) as cs:
        s = cs.source("recv_pci")
        got = s.read_vector("AD")
        assert got.dtype == np.uint64
        assert got.tolist() == values.tolist()
        assert s.read_vector("AD", 2, 3).tolist() == [0xDEADBEEF]
        assert set(s.read_vector("C/BE#").tolist()) == {2}
        assert s.vector_bits("AD") == [channels.index(f"AD[{i}]") for i in range(32)]


def test_roles_and_spec_validation(tmp_path):
    with CaptureSet.create(tmp_path / "r.h5") as cs:
        ok = SourceSpec("a", ["FRAME#", "AD[0]", "AD[1]"], samplerate_hz=1e9, roles={"frame": "FRAME#", "ad": "AD"})
        cs.add_source(ok)
        bad = [
            (SourceSpec("b", ["FRAME#"], samplerate_hz=1e9, roles={"irdy": "IRDY#"}), "unknown channel 'IRDY#'"),
            (SourceSpec("c", ["AD[0]"], samplerate_hz=1e9, roles={"ad": "AD[0]x"}), "unknown channel"),
            (SourceSpec("d", [], samplerate_hz=1e9), "no channels"),
            (SourceSpec("e", ["A", "A"], samplerate_hz=1e9), "duplicate"),
            (SourceSpec("f", ["A"]), "positive sample rate"),
            (SourceSpec("g", ["A"], samplerate_hz=-1.0), "positive sample rate"),
            (SourceSpec("h", ["A"], mode="burst", samplerate_hz=1e9), "mode"),  # type: ignore[arg-type]
            (SourceSpec("bad name", ["A"], samplerate_hz=1e9), "source name"),
            (SourceSpec("sources/x", ["A"], samplerate_hz=1e9), "source name"),
            (SourceSpec("i", ["AD[0]", "AD[2]"], samplerate_hz=1e9), "lacks bit"),
            (SourceSpec("a", ["A"], samplerate_hz=1e9), "exists"),
        ]
        for spec, msg in bad:
            with pytest.raises(UsageError, match=msg):
                cs.add_source(spec)
        # state mode needs no sample rate
        cs.add_source(SourceSpec("j", ["CLK"], mode="state"))
    with CaptureSet.open(tmp_path / "r.h5") as cs:
        assert cs.source_names == ["a", "j"]
        with pytest.raises(UsageError, match="no source 'zz'.*a, j"):
            cs.source("zz")


# ---------------------------------------------------------------------------------------------
# time: the common timeline
# ---------------------------------------------------------------------------------------------
def test_state_mode_pcix_timeline(tmp_path):
    # PCI-X 133: a sample per 7.5 ns clock = 7500 ps, on the analyzer's own time base (starts at 1 us)
    n, trig, offset = 1000, 40, -1234
    rng = np.random.default_rng(3)
    ts = 1_000_000 + np.arange(n, dtype=np.int64) * 7500 + rng.integers(-20, 21, n)  # jitter, still increasing
    bits = rand_bits(rng, n, 90)
    spec = SourceSpec("send_pcix", PCI90, mode="state", samplerate_hz=133.33e6, trigger_sample=trig,
                      offset_ps=offset, bus={"kind": "pcix", "width_bits": 64, "clock_hz": 133.33e6})
    p = tmp_path / "s.h5"
    write_set(p, (spec, pack_bits(bits), ts), chunk_samples=128)
    with CaptureSet.open(p) as cs:
        s = cs.source("send_pcix")
        assert s.mode == "state" and s.samplerate_hz == 133.33e6
        t = s.times_ps()
        assert t.dtype == np.int64
        assert np.array_equal(t, ts - ts[trig] + offset)
        assert t[trig] == offset                                    # zero at the trigger, plus the deskew
        assert np.array_equal(s.times_ps(10, 20), t[10:20])
        assert s.duration_ps == int(ts[-1] - ts[0])
        assert [s.sample_at(int(x)) for x in t] == list(range(n))  # a sample's own time finds it
        assert s.sample_at(int(t[5]) + 1) == 6                       # first sample at or after
        assert s.sample_at(int(t[0]) - 10**9) == 0
        assert s.sample_at(int(t[-1]) + 1) == n
        a, b = s.window(int(t[100]), int(t[200]))
        assert (a, b) == (100, 200)
        assert np.array_equal(s.read_packed(a, b), pack_bits(bits)[100:200])
        # 146.25 ns from the trigger (19.5 clocks, edges jitter by 20 ps): 20 samples
        a, b = s.window(offset, offset + 146_250)
        assert a == trig and b - a == 20


def test_state_mode_equal_timestamps(tmp_path):
    # two samples on one clock edge (e.g. merged pods): sample_at finds the first
    ts = np.array([0, 7500, 7500, 7500, 15000], np.int64)
    spec = SourceSpec("s", ["A"], mode="state")
    p = tmp_path / "e.h5"
    write_set(p, (spec, np.zeros((5, 1), np.uint8), ts))
    with CaptureSet.open(p) as cs:
        s = cs.source("s")
        assert s.sample_at(7500) == 1 and s.sample_at(7501) == 4 and s.sample_at(15000) == 4


def test_timing_mode_timeline(tmp_path):
    n, trig, offset = 2000, 500, 2500
    spec = SourceSpec("probe", ["RX_DV", "RXD[0]", "RXD[1]"], samplerate_hz=200e6,
                      trigger_sample=trig, offset_ps=offset)
    p = tmp_path / "t.h5"
    write_set(p, (spec, np.zeros((n, 1), np.uint8), None))
    with CaptureSet.open(p) as cs:
        s = cs.source("probe")
        t = s.times_ps()
        assert np.array_equal(t, (np.arange(n) - trig) * 5000 + offset)
        assert t[trig] == offset and t[0] == -trig * 5000 + offset
        assert s.duration_ps == (n - 1) * 5000
        assert s.sample_at(offset) == trig
        assert s.sample_at(offset + 1) == trig + 1
        assert s.sample_at(offset - 1) == trig
        assert s.sample_at(-10**12) == 0 and s.sample_at(10**12) == n
        assert s.window(offset, offset + 1_000_000) == (trig, trig + 200)   # 1 us at 200 MHz


@pytest.mark.parametrize("rate", [3e9, 1e9, 400e6, 133.33e6, 66.67e6, 33.333333e6, 21128471.672001604])
def test_timing_sample_at_inverts_times_ps(tmp_path, rate):
    # periods that are not whole picoseconds: sample times are rounded, sample_at must agree with them
    n, trig = 3000, 907
    p = tmp_path / "r.h5"
    write_set(p, (SourceSpec("s", ["A"], samplerate_hz=rate, trigger_sample=trig, offset_ps=17), np.zeros((n, 1), np.uint8), None))
    with CaptureSet.open(p) as cs:
        s = cs.source("s")
        t = s.times_ps()
        assert t[trig] == 17
        assert np.all(np.diff(t) > 0)
        assert [s.sample_at(int(x)) for x in t] == list(range(n))
        assert [s.sample_at(int(x) + 1) for x in t[:-1]] == list(range(1, n))


def test_two_instruments_share_the_common_timeline(tmp_path):
    # One FRAME# falling edge at 54 ns after the trigger, seen by a 1 GHz timing analyzer and by a
    # PCI-X state analyzer, each on its own time base with its own trigger sample. The state
    # analyzer's trigger fired 1.5 ns early, so its times relative to its trigger are 1.5 ns short:
    # offset_ps = +1500 deskews it onto the common timeline.
    edge_ps = 54_000
    tb = np.ones((4000, 1), np.uint8)
    tb[1000 + 54:, 0] = 0              # trigger at sample 1000, 1 ns/sample: first low sample 1054
    ts = 100_000 + np.arange(30, dtype=np.int64) * 7500
    sb = np.ones((30, 1), np.uint8)
    sb[10:, 0] = 0                     # local: 7 clocks after the trigger sample 3 = 52.5 ns (+1.5 ns skew)
    p = tmp_path / "two.h5"
    write_set(p,
              (SourceSpec("probe", ["FRAME#"], samplerate_hz=1e9, trigger_sample=1000), tb, None),
              (SourceSpec("send_pcix", ["FRAME#"], mode="state", trigger_sample=3, offset_ps=1500), sb, ts))
    with CaptureSet.open(p) as cs:
        a, b = cs.source("probe"), cs.source("send_pcix")
        ia = int(np.flatnonzero(a.read_channel("FRAME#") == 0)[0])
        ib = int(np.flatnonzero(b.read_channel("FRAME#") == 0)[0])
        assert a.times_ps(ia, ia + 1)[0] == edge_ps
        assert b.times_ps(ib, ib + 1)[0] == edge_ps
        assert a.sample_at(edge_ps) == ia and b.sample_at(edge_ps) == ib
        # a common window selects the same stretch of bus time in both
        assert a.window(edge_ps - 15_000, edge_ps + 15_000) == (1039, 1069)
        assert b.window(edge_ps - 15_000, edge_ps + 15_000) == (8, 12)


def _memory_set() -> CaptureSet:
    h5 = h5py.File(f"mem-{os.getpid()}-{id(object())}.h5", "w", driver="core", backing_store=False)
    h5.create_group("sources")
    return CaptureSet(h5, Path("memory.h5"))


@settings(max_examples=60, deadline=None)
@given(rate=st.floats(1e5, 5e9), n=st.integers(1, 400), trig=st.integers(0, 500),
       offset=st.integers(-10**9, 10**9), data=st.data())
def test_timing_timeline_properties(rate, n, trig, offset, data):
    cs = _memory_set()
    w = cs.add_source(SourceSpec("s", ["A"], samplerate_hz=rate, trigger_sample=trig, offset_ps=offset))
    w.append(np.zeros((n, 1), np.uint8))
    s = cs.source("s")
    t = s.times_ps()
    if trig < n:
        assert t[trig] == offset
    assert np.all(np.diff(t) >= 0)
    i = data.draw(st.integers(0, n - 1))
    assert s.sample_at(int(t[i])) == int(np.searchsorted(t, t[i], side="left"))
    q = data.draw(st.integers(int(t[0]) - 10**6, int(t[-1]) + 10**6))
    assert s.sample_at(q) == int(np.searchsorted(t, q, side="left"))
    cs._h5.close()


@settings(max_examples=60, deadline=None)
@given(steps=st.lists(st.integers(0, 10**6), min_size=1, max_size=300), trig=st.integers(0, 400),
       offset=st.integers(-10**9, 10**9), data=st.data())
def test_state_timeline_properties(steps, trig, offset, data):
    ts = np.cumsum(np.array(steps, dtype=np.int64))
    n = len(ts)
    cs = _memory_set()
    w = cs.add_source(SourceSpec("s", ["A"], mode="state", trigger_sample=trig, offset_ps=offset), chunk_samples=16)
    w.append(np.zeros((n, 1), np.uint8), ts)
    s = cs.source("s")
    t = s.times_ps()
    assert t[min(trig, n - 1)] == offset          # a trigger past the end clamps to the last sample
    q = data.draw(st.integers(int(t[0]) - 10, int(t[-1]) + 10))
    assert s.sample_at(q) == int(np.searchsorted(t, q, side="left"))
    # Times of arbitrary indices (repeated, unsorted, sparse or dense), read in windows of any size.
    idx = np.array(data.draw(st.lists(st.integers(0, n - 1), max_size=50)), dtype=np.int64)
    block = data.draw(st.integers(1, 64))
    assert np.array_equal(s.times_at(idx, block=block), t[idx])
    cs._h5.close()


# ---------------------------------------------------------------------------------------------
# streaming writes
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["timing", "state"])
def test_streaming_append_equals_one_block(tmp_path, mode):
    rng = np.random.default_rng(4)
    n = 20_000
    packed = pack_bits(rand_bits(rng, n, 90))
    ts = np.cumsum(rng.integers(7000, 8000, n)).astype(np.int64) if mode == "state" else None
    spec = dict(name="s", channels=PCI90, mode=mode, samplerate_hz=500e6 if mode == "timing" else None,
                trigger_sample=77)
    one, many = tmp_path / "one.h5", tmp_path / "many.h5"
    write_set(one, (SourceSpec(**spec), packed, ts), chunk_samples=1000)
    with CaptureSet.create(many) as cs:
        w = cs.add_source(SourceSpec(**spec), chunk_samples=1000)
        cuts = np.sort(rng.integers(0, n, 300))
        edges = [0, *cuts.tolist(), n]
        for a, b in zip(edges[:-1], edges[1:]):       # includes empty blocks
            w.append(packed[a:b], None if ts is None else ts[a:b])
        assert w.num_samples == n
    with CaptureSet.open(one) as c1, CaptureSet.open(many) as c2:
        s1, s2 = c1.source("s"), c2.source("s")
        assert np.array_equal(s1.read_packed(), s2.read_packed())
        assert np.array_equal(s2.read_packed(), packed)
        assert np.array_equal(s1.times_ps(), s2.times_ps())
        assert s1.describe() == s2.describe()
        blocks = list(s2.iter_packed(100, 5000, block=999))
        assert [b for b, _ in blocks] == list(range(100, 5000, 999))
        assert np.array_equal(np.concatenate([x for _, x in blocks]), packed[100:5000])


def test_append_validation(tmp_path):
    with CaptureSet.create(tmp_path / "a.h5") as cs:
        t = cs.add_source(SourceSpec("t", ["A", "B"] + [f"D[{i}]" for i in range(8)], samplerate_hz=1e9))
        with pytest.raises(UsageError, match=r"\(n, 2\)"):
            t.append(np.zeros((4, 1), np.uint8))
        with pytest.raises(UsageError, match=r"\(n, 2\)"):
            t.append(np.zeros(8, np.uint8))
        with pytest.raises(UsageError, match="no timestamps"):
            t.append(np.zeros((4, 2), np.uint8), np.arange(4))
        s = cs.add_source(SourceSpec("s", ["A"], mode="state"))
        with pytest.raises(UsageError, match="one timestamp per"):
            s.append(np.zeros((4, 1), np.uint8))
        with pytest.raises(UsageError, match="one timestamp per"):
            s.append(np.zeros((4, 1), np.uint8), np.arange(3))
        with pytest.raises(UsageError, match="must not decrease"):
            s.append(np.zeros((3, 1), np.uint8), np.array([0, 10, 5]))
        s.append(np.zeros((3, 1), np.uint8), np.array([0, 10, 20]))
        with pytest.raises(UsageError, match="must not decrease"):
            s.append(np.zeros((1, 1), np.uint8), np.array([19]))
        s.append(np.zeros((1, 1), np.uint8), np.array([20]))
        assert s.num_samples == 4 and t.num_samples == 0


def test_reopen_r_plus_and_append(tmp_path):
    p = tmp_path / "x.h5"
    write_set(p, (SourceSpec("s", ["A"], mode="state"), np.array([[1], [0]], np.uint8), np.array([0, 7500])))
    with CaptureSet.open(p, "r+") as cs:
        w = cs.writer("s")
        w.append(np.array([[1]], np.uint8), np.array([15000]))
        w.set_trigger(1)
        w.set_offset(-7)
    with CaptureSet.open(p) as cs:
        s = cs.source("s")
        assert s.read_channel("A").tolist() == [1, 0, 1]
        assert s.times_ps().tolist() == [-7500 - 7, -7, 7500 - 7]


def test_a_read_only_file_checks_each_source_once_a_writer_sees_its_changes(tmp_path):
    p = tmp_path / "x.h5"
    write_set(p, (SourceSpec("s", ["A"], mode="state"), np.array([[1], [0]], np.uint8), np.array([0, 7500])))
    with CaptureSet.open(p) as cs:  # checked when opened: the source handed out is that one
        assert cs.source("s") is cs.source("s") and cs.sources["s"] is cs.source("s")
    with CaptureSet.open(p, "r+") as cs:
        before = cs.source("s")
        cs.writer("s").set_offset(-7)
        assert cs.source("s") is not before and cs.source("s").offset_ps == -7


def test_datasets_are_chunked_gzip_shuffle_fletcher32(tmp_path):
    p = tmp_path / "f.h5"
    rng = np.random.default_rng(5)
    write_set(p, (SourceSpec("t", PCI90, samplerate_hz=1e9), pack_bits(rand_bits(rng, 100, 90)), None),
              (SourceSpec("s", ["A"], mode="state"), np.zeros((10, 1), np.uint8), np.arange(10)))
    with CaptureSet.open(p, "r+") as cs:
        cs.write_table("truth/packets", np.zeros(50, dtype=[("seq", "u4"), ("t_ps", "i8")]))
        cs.write_table("truth/none", np.zeros(0, dtype=[("seq", "u4")]))
    with h5py.File(p, "r") as h5:
        for path, chunks, maxshape in [("sources/t/samples", (DEFAULT_CHUNK_SAMPLES, 12), (None, 12)),
                                       ("sources/s/samples", (DEFAULT_CHUNK_SAMPLES, 1), (None, 1)),
                                       ("sources/s/timestamps_ps", (DEFAULT_CHUNK_SAMPLES,), (None,))]:
            ds = h5[path]
            assert ds.compression == "gzip" and ds.compression_opts == 1 and ds.shuffle and ds.fletcher32, path
            assert ds.chunks == chunks and ds.maxshape == maxshape, path
        assert h5["sources/t/samples"].dtype == np.uint8 and h5["sources/s/timestamps_ps"].dtype == np.int64
        tab = h5["truth/packets"]
        assert tab.compression == "gzip" and tab.shuffle and tab.chunks is not None and tab.fletcher32
        assert h5["truth/none"].fletcher32 and h5["truth/none"].shape == (0,)


# ---------------------------------------------------------------------------------------------
# laziness: a window of a big source reads a few chunks, not the source
# ---------------------------------------------------------------------------------------------
class CountingFile(io.FileIO):
    """A file object that counts the bytes HDF5 reads through it."""

    bytes_read = 0

    def readinto(self, b):  # type: ignore[override]
        n = super().readinto(b)
        CountingFile.bytes_read += n or 0
        return n

    def read(self, size=-1):
        data = super().read(size)
        CountingFile.bytes_read += len(data)
        return data


def test_window_read_of_20M_samples_is_lazy(tmp_path):
    n, block = 20_000_000, 1_000_000
    p = tmp_path / "big.h5"
    pattern = (np.arange(block, dtype=np.uint32) % 251).astype(np.uint8).reshape(-1, 1)
    with CaptureSet.create(p) as cs:
        w = cs.add_source(SourceSpec("probe", [f"D[{i}]" for i in range(8)], samplerate_hz=1e9, trigger_sample=n // 2))
        for _ in range(n // block):
            w.append(pattern)
    with CaptureSet.open(p) as cs:
        s = cs.source("probe")
        assert s.num_samples == n
        tracemalloc.start()
        try:
            a, b = s.window(1_234_000, 11_234_000)          # 10 us, 1.234 us after the trigger
            win = s.read_packed(a, b)
            vec = s.read_vector("D", a, b)
            t = s.times_ps(a, b)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert (a, b) == (n // 2 + 1_234, n // 2 + 11_234)  # 1 ns per sample
        assert b - a == 10_000 and t[0] == 1_234_000
        assert np.array_equal(win[:, 0], pattern[(a % block):(a % block) + 10_000, 0])
        assert np.array_equal(vec, win[:, 0].astype(np.uint64))
        assert peak < 2_000_000, f"window read allocated {peak} bytes for a 20 MB source"

    # the same at the file level: the window is a few 64 KiB chunks out of 20 MB of samples
    CountingFile.bytes_read = 0
    with h5py.File(CountingFile(p, "r"), "r") as h5:
        s = Source(h5["sources/probe"])
        win = s.read_packed(15_000_000, 15_010_000)
        assert win.shape == (10_000, 1)
    assert CountingFile.bytes_read < 1_000_000, CountingFile.bytes_read
    assert os.path.getsize(p) > 3 * CountingFile.bytes_read


def test_state_sample_at_bisects_without_loading_timestamps(tmp_path):
    n = 2_000_000
    p = tmp_path / "state.h5"
    with CaptureSet.create(p) as cs:
        w = cs.add_source(SourceSpec("s", ["A"], mode="state", trigger_sample=0))
        for k in range(0, n, 500_000):
            w.append(np.zeros((500_000, 1), np.uint8), np.arange(k, k + 500_000, dtype=np.int64) * 7500)
    with CaptureSet.open(p) as cs:
        s = cs.source("s")
        tracemalloc.start()
        try:
            a, b = s.window(7500 * 1_500_000, 7500 * 1_500_100)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert (a, b) == (1_500_000, 1_500_100)
        assert peak < 1_000_000, peak      # all timestamps would be 16 MB


# ---------------------------------------------------------------------------------------------
# tables
# ---------------------------------------------------------------------------------------------
FRAMES = np.dtype([("seq", "u4"), ("start_ps", "i8"), ("end_ps", "i8"), ("bytes", "u2"), ("kind", "S8")])


def frames(n: int, base: int = 0) -> np.ndarray:
    a = np.zeros(n, FRAMES)
    a["seq"] = np.arange(n) + base
    a["start_ps"] = np.arange(n) * 11_000_000
    a["end_ps"] = a["start_ps"] + 11_520_000
    a["bytes"] = 1442
    a["kind"] = b"udp"
    return a


def test_tables_roundtrip(tmp_path):
    p = tmp_path / "t.h5"
    with CaptureSet.create(p) as cs:
        cs.add_source(SourceSpec("send_pci", ["A"], samplerate_hz=1e9)).append(np.zeros((3, 1), np.uint8))
        cs.write_table("truth/probe/frames", frames(100), units={"start_ps": "ps", "end_ps": "ps", "bytes": "B"},
                       description="frames on the wire", attrs={"source": "probe", "count": 100,
                                                                "params": {"spacing_us": 11}})
        cs.write_table("decoded/send_pci/transactions", np.zeros(0, [("start_ps", "i8"), ("addr", "u8")]))
        cs.write_table("summary", frames(1))
    with CaptureSet.open(p) as cs:
        assert cs.table_names() == ["decoded/send_pci/transactions", "summary", "truth/probe/frames"]
        got = cs.read_table("truth/probe/frames")
        assert got.dtype == FRAMES and np.array_equal(got, frames(100))
        assert got["kind"][0] == b"udp"
        a = cs.table_attrs("truth/probe/frames")
        assert json.loads(a["units"]) == {"start_ps": "ps", "end_ps": "ps", "bytes": "B"}
        assert a["description"] == "frames on the wire"
        assert a["source"] == "probe" and a["count"] == 100 and json.loads(a["params"]) == {"spacing_us": 11}
        empty = cs.read_table("decoded/send_pci/transactions")
        assert len(empty) == 0 and empty.dtype.names == ("start_ps", "addr")
        assert json.loads(cs.table_attrs("summary")["units"]) == {}
        with pytest.raises(UsageError, match="no table 'truth/nope'"):
            cs.read_table("truth/nope")
        with pytest.raises(UsageError, match="no table"):
            cs.read_table("sources/send_pci/samples")      # a dataset, not a table
        with pytest.raises(UsageError, match="structured"):
            cs.write_table("truth/x", np.arange(3))


def test_table_overwrite_goes_through_a_temporary_name(tmp_path, monkeypatch):
    p = tmp_path / "o.h5"
    moves: list[tuple[str, str]] = []
    real_move = h5py.Group.move

    def spy(self, source, dest):
        moves.append((source, dest))
        return real_move(self, source, dest)

    monkeypatch.setattr(h5py.Group, "move", spy)
    with CaptureSet.create(p) as cs:
        cs.write_table("truth/packets", frames(10), units={"start_ps": "ps"})
        cs.write_table("truth/packets", frames(3, base=50), units={"end_ps": "ps"})
    assert moves == [(".packets.partial", "packets")] * 2
    with CaptureSet.open(p) as cs:
        got = cs.read_table("truth/packets")
        assert len(got) == 3 and got["seq"].tolist() == [50, 51, 52]
        assert json.loads(cs.table_attrs("truth/packets")["units"]) == {"end_ps": "ps"}
        assert cs.table_names() == ["truth/packets"]
    with h5py.File(p, "r") as h5:
        assert list(h5["truth"].keys()) == ["packets"]


def test_failed_table_overwrite_keeps_the_old_table(tmp_path):
    p = tmp_path / "f.h5"
    with CaptureSet.create(p) as cs:
        cs.write_table("decoded/x", frames(5))
        with pytest.raises(TypeError):
            cs.write_table("decoded/x", frames(7), attrs={"bad": object()})   # not JSON-able: fails mid-write
        assert len(cs.read_table("decoded/x")) == 5
        assert cs.table_names() == ["decoded/x"]                             # no '.x.partial' left behind
    with CaptureSet.open(p) as cs:
        assert np.array_equal(cs.read_table("decoded/x"), frames(5))


# ---------------------------------------------------------------------------------------------
# atomic creation
# ---------------------------------------------------------------------------------------------
def test_failed_create_leaves_nothing(tmp_path):
    p = tmp_path / "out.h5"
    with pytest.raises(RuntimeError, match="boom"):
        with CaptureSet.create(p) as cs:
            cs.add_source(SourceSpec("s", ["A"], samplerate_hz=1e9)).append(np.zeros((10, 1), np.uint8))
            raise RuntimeError("boom")
    assert os.listdir(tmp_path) == []
    with pytest.raises(KeyboardInterrupt):
        with CaptureSet.create(p):
            raise KeyboardInterrupt
    assert os.listdir(tmp_path) == []


def test_failed_rewrite_keeps_the_previous_file(tmp_path):
    p = tmp_path / "out.h5"
    write_set(p, (SourceSpec("old", ["A"], samplerate_hz=1e9), np.ones((4, 1), np.uint8), None))
    with pytest.raises(ValueError):
        with CaptureSet.create(p) as cs:
            cs.add_source(SourceSpec("new", ["A"], samplerate_hz=1e9))
            raise ValueError
    with CaptureSet.open(p) as cs:
        assert cs.source_names == ["old"]
    assert sorted(os.listdir(tmp_path)) == ["out.h5"]


def test_create_writes_a_partial_then_renames(tmp_path):
    p = tmp_path / "out.h5"
    old = os.umask(0o022)
    try:
        cs = CaptureSet.create(p, notes="n")
        assert not p.exists()
        partial = [f for f in os.listdir(tmp_path)]
        assert len(partial) == 1 and partial[0].startswith(".out.h5.") and partial[0].endswith(".partial")
        assert cs.path == tmp_path / partial[0]
        cs.close()
        cs.close()                                 # idempotent
    finally:
        os.umask(old)
    assert os.listdir(tmp_path) == ["out.h5"] and cs.path == p
    # the file gets the permissions any new file would get (mkstemp alone gives 0600)
    assert stat.S_IMODE(os.stat(p).st_mode) == 0o644
    with CaptureSet.open(p) as cs:
        assert cs.notes == "n" and cs.source_names == []


def test_create_not_atomic_and_no_overwrite(tmp_path):
    p = tmp_path / "direct.h5"
    cs = CaptureSet.create(p, atomic=False)
    cs.add_source(SourceSpec("s", ["A"], mode="state"))
    assert not p.exists()                 # set up under a temporary name: a kill here leaves no unreadable file
    cs.start_swmr()                       # named when samples start to arrive, readers follow it from here
    assert p.exists() and os.listdir(tmp_path) == ["direct.h5"]
    cs.writer("s").append(np.ones((4, 1), np.uint8), np.arange(4))
    with CaptureSet.open(p, swmr=True) as reader:
        assert reader.source("s").num_samples == 4
    cs.close()
    with pytest.raises(UsageError, match="exists"):
        CaptureSet.create(p, overwrite=False)


def test_create_in_missing_folder(tmp_path):
    with pytest.raises(UsageError, match="does not exist"):
        CaptureSet.create(tmp_path / "nope" / "x.h5")


def test_create_in_unwritable_folder(read_only_folder):
    code = ("import sys\nfrom nicrig.acquisition.capture import CaptureSet\nfrom nicrig.errors import UsageError\n"
            "try:\n    CaptureSet.create(sys.argv[1])\nexcept UsageError as e:\n    print(e)\n    sys.exit(3)\n")
    r = run_unprivileged([sys.executable, "-c", code, str(read_only_folder / "x.h5")])
    assert r.returncode == 3, r.stderr
    assert "not writable" in r.stdout
    assert list(read_only_folder.iterdir()) == []


def test_other_outputs_name_an_unwritable_folder_too(read_only_folder):
    """Reports, exports and Perfetto traces go through nicrig.atomic.replacing: the same one-line error."""
    code = ("import sys\nfrom nicrig.atomic import replacing\nfrom nicrig.errors import UsageError\n"
            "try:\n    with replacing(sys.argv[1]) as tmp:\n        tmp.write_text('x')\n"
            "except UsageError as e:\n    print(e)\n    sys.exit(3)\n")
    r = run_unprivileged([sys.executable, "-c", code, str(read_only_folder / "r.html")])
    assert r.returncode == 3, r.stderr
    assert r.stdout.strip() == f"{read_only_folder / 'r.html'}: folder {read_only_folder} is not writable"
    assert list(read_only_folder.iterdir()) == []


def test_create_when_the_temporary_file_cannot_be_made(tmp_path, monkeypatch):
    # what an unwritable folder looks like to root, or a full or read-only file system to anyone
    def refuse(*a, **k):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(tempfile, "mkstemp", refuse)
    with pytest.raises(UsageError, match=r"x\.h5.*Permission denied"):
        CaptureSet.create(tmp_path / "x.h5")
    assert os.listdir(tmp_path) == []


# ---------------------------------------------------------------------------------------------
# validation on open: a FormatError naming the file, never a raw h5py error
# ---------------------------------------------------------------------------------------------
def _valid(p: Path) -> Path:
    write_set(p,
              (SourceSpec("send_pci", PCI90, samplerate_hz=1e9), np.zeros((100, 12), np.uint8), None),
              (SourceSpec("recv_pcix", ["FRAME#", "AD[0]"], mode="state"), np.zeros((10, 1), np.uint8), np.arange(10)))
    return p


def _expect_format_error(p: Path, *fragments: str) -> FormatError:
    with pytest.raises(FormatError) as ei:
        CaptureSet.open(p)
    msg = str(ei.value)
    assert str(p) in msg, msg
    for f in fragments:
        assert f in msg, msg
    assert "\n" not in msg
    return ei.value


def test_open_missing_file_and_folder(tmp_path):
    _expect_format_error(tmp_path / "nope.h5", "no such file")
    _expect_format_error(tmp_path, "is a folder")


@pytest.mark.parametrize("content", [b"", b"hello, not hdf5\n" * 100, b"\x89HDF\r\n\x1a\n" + b"\0" * 10])
def test_open_non_hdf5(tmp_path, content):
    p = tmp_path / "x.h5"
    p.write_bytes(content)
    _expect_format_error(p, "not a readable HDF5 file")


@pytest.mark.parametrize("fraction", [0.02, 0.25, 0.5, 0.9, 0.999])
def test_open_truncated(tmp_path, fraction):
    p = _valid(tmp_path / "t.h5")
    size = p.stat().st_size
    with open(p, "r+b") as f:
        f.truncate(int(size * fraction))
    _expect_format_error(p, "truncated")


def _mutate(p: Path, fn) -> Path:
    with h5py.File(p, "r+") as h5:
        fn(h5)
    return p


def test_open_hdf5_without_format(tmp_path):
    p = tmp_path / "plain.h5"
    with h5py.File(p, "w") as h5:
        h5["x"] = np.arange(3)
    _expect_format_error(p, "not a nicrig file", "'format'")


def test_open_results_file(tmp_path):
    p = tmp_path / "results.h5"
    with h5py.File(p, "w") as h5:
        h5.attrs["format"] = "nicrig-results"
        h5.attrs["format_version"] = 1
    _expect_format_error(p, "udpmon results file", "not a capture set")


def test_open_foreign_format_name(tmp_path):
    p = tmp_path / "o.h5"
    with h5py.File(p, "w") as h5:
        h5.attrs["format"] = np.bytes_(b"someone-else")
    _expect_format_error(p, "someone-else")


def test_open_newer_version(tmp_path):
    p = _mutate(_valid(tmp_path / "n.h5"), lambda h5: h5.attrs.__setitem__("format_version", FORMAT_VERSION + 1))
    _expect_format_error(p, f"version {FORMAT_VERSION + 1} is newer", "upgrade")


@pytest.mark.parametrize("version", [0, -3])
def test_open_bad_version(tmp_path, version):
    p = _mutate(_valid(tmp_path / "b.h5"), lambda h5: h5.attrs.__setitem__("format_version", version))
    _expect_format_error(p, "bad format_version")


def test_open_without_sources_group(tmp_path):
    p = _mutate(_valid(tmp_path / "s.h5"), lambda h5: h5.__delitem__("sources"))
    _expect_format_error(p, "'sources'")


def _replace(h5: h5py.File, path: str, data) -> None:
    del h5[path]
    h5[path] = data


@pytest.mark.parametrize("fn, fragments", [
    (lambda h5: h5.__delitem__("sources/recv_pcix/timestamps_ps"), ["recv_pcix", "without timestamps_ps"]),
    (lambda h5: _replace(h5, "sources/recv_pcix/timestamps_ps", np.arange(9)), ["9 timestamps for 10 samples"]),
    (lambda h5: _replace(h5, "sources/send_pci/samples", np.zeros((100, 11), np.uint8)),
     ["send_pci", "(N, 12) for 90 channels", "(100, 11)"]),
    (lambda h5: _replace(h5, "sources/send_pci/samples", np.zeros((100, 12), np.uint16)), ["uint16"]),
    (lambda h5: _replace(h5, "sources/send_pci/samples", np.zeros(100, np.uint8)), ["(100,)"]),
    (lambda h5: h5.__delitem__("sources/send_pci/samples"), ["send_pci", "malformed", "samples"]),
    (lambda h5: (h5.__delitem__("sources/send_pci/samples"), h5.create_group("sources/send_pci/samples")),
     ["send_pci", "malformed", "not a dataset"]),
    (lambda h5: h5["sources/send_pci"].attrs.__delitem__("channels"), ["send_pci", "malformed", "channels"]),
    (lambda h5: h5["sources/send_pci"].attrs.__delitem__("samplerate_hz"), ["send_pci", "positive samplerate_hz"]),
    (lambda h5: h5["sources/send_pci"].attrs.__setitem__("mode", "burst"), ["unknown mode 'burst'"]),
    (lambda h5: h5["sources/send_pci"].attrs.__setitem__("roles", "{frame: FRAME#"), ["send_pci", "malformed"]),
    (lambda h5: h5["sources/send_pci"].attrs.__setitem__("trigger_sample", "soon"), ["send_pci", "malformed"]),
])
def test_open_malformed_source(tmp_path, fn, fragments):
    p = _mutate(_valid(tmp_path / "m.h5"), fn)
    _expect_format_error(p, *fragments)


def test_errors_are_nicrig_errors():
    assert issubclass(FormatError, NicrigError) and issubclass(UsageError, NicrigError)
    assert FormatError.exit_code == 2


# ---------------------------------------------------------------------------------------------
# property: any channel count, any samples, bit-exact through a file
# ---------------------------------------------------------------------------------------------
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nch=st.integers(1, 130), n=st.integers(0, 300), mode=st.sampled_from(["timing", "state"]),
       chunk=st.integers(1, 64), seed=st.integers(0, 2**32 - 1))
def test_roundtrip_property(nch, n, mode, chunk, seed):
    rng = np.random.default_rng(seed)
    bits = rand_bits(rng, n, nch)
    names = [f"D{i}" for i in range(nch)]
    ts = np.sort(rng.integers(0, 10**12, n)).astype(np.int64) if mode == "state" else None
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "p.h5"
        write_set(p, (SourceSpec("s", names, mode=mode, samplerate_hz=1e8 if mode == "timing" else None),
                      pack_bits(bits), ts), chunk_samples=chunk)
        with CaptureSet.open(p) as cs:
            s = cs.source("s")
            assert s.channels == names and s.unitsize == unitsize_for(nch) and s.num_samples == n
            packed = s.read_packed()
            assert packed.dtype == np.uint8 and packed.shape == (n, unitsize_for(nch))
            assert np.array_equal(unpack_bits(packed, nch), bits)
            k = int(rng.integers(0, nch))
            assert np.array_equal(s.read_channel(f"D{k}"), bits[:, k])
            if ts is not None:
                assert np.array_equal(s.times_ps(), ts - (ts[0] if n else 0))


def test_describe_is_json_ready(tmp_path):
    p = tmp_path / "d.h5"
    write_set(p, (SourceSpec("send_pcix", PCI90, mode="state", samplerate_hz=133.33e6, trigger_sample=2,
                             offset_ps=5, roles={"frame": "FRAME#"}, bus={"kind": "pcix"}),
                  np.zeros((4, 12), np.uint8), np.array([0, 7500, 15000, 22500])))
    with CaptureSet.open(p) as cs:
        d = cs.source("send_pcix").describe()
    assert json.loads(json.dumps(d)) == d
    assert d["mode"] == "state" and d["num_samples"] == 4 and d["num_channels"] == 90 and d["unitsize"] == 12
    assert d["duration_ps"] == 22500 and d["vectors"] == {"AD": 64, "C/BE#": 8}
    assert d["roles"] == {"frame": "FRAME#"} and d["bus"] == {"kind": "pcix"} and d["offset_ps"] == 5


def test_module_constants_match_the_docs():
    assert capture.STORAGE == {"compression": "gzip", "compression_opts": 1, "shuffle": True, "fletcher32": True}
    assert DEFAULT_CHUNK_SAMPLES == 65536
    text = DOC.read_text()
    for word in (FORMAT_NAME, "format_version", "timestamps_ps", "trigger_sample", "offset_ps", "gzip level 1",
                 "(65536, unitsize)", "Ground-truth tables", "truth/<source>/transactions",
                 "truth/<source>/interrupts", "truth/probe/frames", "truth/packets", "docs/simulator.md"):
        assert word in text, word


# ---------------------------------------------------------------------------------------------
# docs/formats.md: its bare-h5py examples run and agree with the library
# ---------------------------------------------------------------------------------------------
DOC = Path(__file__).resolve().parents[1] / "docs" / "formats.md"


RESULTS_HEADING = "## udpmon results files"


def _doc_blocks(results: bool) -> list[str]:
    """The Python examples of the capture-set part of formats.md, or of its udpmon results part."""
    capture_part, _, results_part = DOC.read_text().partition(RESULTS_HEADING)
    return re.findall(r"```python\n(.*?)```", results_part if results else capture_part, flags=re.S)


def doc_examples() -> dict:
    blocks = _doc_blocks(results=False)
    assert len(blocks) >= 2
    ns: dict = {}
    for b in blocks:
        exec(compile(b, str(DOC), "exec"), ns)
    return ns


def test_doc_results_example(tmp_path, monkeypatch, capsys):
    """The bare-h5py example for udpmon results prints the medians the file's own table holds."""
    from nicrig.udpmon.results import LatencyVisit, ResultsFile, write_latency

    rng = np.random.default_rng(5)
    rtt = {s: rng.integers(10_000, 90_000, 40) for s in (64, 1000, 1472, 2000)}
    rtt[1000][:3] = -1
    monkeypatch.chdir(tmp_path)
    with ResultsFile.create("lat.h5") as rf:
        rf.set_run("latency", peer="198.18.0.2:14401", argv=[], settings={}, remote={})
        write_latency(rf, [LatencyVisit(0, k, s, 0, 4_000_000, v) for k, (s, v) in enumerate(rtt.items())],
                      mtu=1500, bin_us=1.0)
        table = rf.read_table("latency/sizes")
    (block,) = _doc_blocks(results=True)
    exec(compile(block, str(DOC), "exec"), {})
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(table)
    for line, row in zip(lines, table):
        assert line.split()[0] == str(row["size_bytes"])
        assert float(line.split("frame(s)")[1].split()[0]) == pytest.approx(row["median_us"], abs=0.005)
        assert f"({row['timeouts']} lost)" in line


def _frame_set(p: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(9)
    n = 3000
    bits = rand_bits(rng, n, 90)
    frame = np.ones(n, np.uint8)
    for a, b in [(100, 180), (400, 401), (1500, 2222), (2999, 3000)]:
        frame[a:b] = 0
    bits[:, 0] = frame
    ts = np.cumsum(rng.integers(7400, 7600, n)).astype(np.int64)
    write_set(p,
              (SourceSpec("send_pci", PCI90, samplerate_hz=3e9, trigger_sample=450, offset_ps=-777), pack_bits(bits), None),
              (SourceSpec("send_pcix", PCI90, mode="state", trigger_sample=1700, offset_ps=1234), pack_bits(bits), ts))
    return bits, frame, ts


def test_doc_decode_example(tmp_path):
    ex = doc_examples()
    p = tmp_path / "doc.h5"
    bits, _, _ = _frame_set(p)
    frame, ad = ex["decode"](p, "send_pci", 100, 900)
    assert np.array_equal(frame, bits[100:900, 0])
    assert np.array_equal(ad, vector_value(bits, PCI90, "AD")[100:900])


@pytest.mark.parametrize("source", ["send_pci", "send_pcix"])
def test_doc_frame_transitions_example(tmp_path, capsys, source):
    ex = doc_examples()
    p = tmp_path / "doc.h5"
    _, frame, _ = _frame_set(p)
    ex["frame_transitions"](p, source)
    lines = capsys.readouterr().out.splitlines()
    idx = np.flatnonzero(np.diff(frame)) + 1
    assert len(lines) == len(idx) == 7
    with CaptureSet.open(p) as cs:
        s = cs.source(source)
        t = s.times_ps()
    for line, i in zip(lines, idx):
        ns_text, _, rest = line.partition(" ns  sample ")
        assert float(ns_text) == pytest.approx(t[i] / 1000, abs=1e-3)
        assert int(rest.split()[0]) == i
        assert rest.endswith("asserted (0)" if frame[i] == 0 else "deasserted (1)")
