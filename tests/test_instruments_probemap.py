"""Probe maps: loading and checking the TOML, pod bytes to packed samples and back, joining pods that arrive apart."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from nicrig.acquisition.capture import unpack_bits
from nicrig.acquisition.instruments import probemap
from nicrig.acquisition.instruments.probemap import (
    PodAssembler,
    ProbeMap,
    pack_pods,
    pod_bytes,
)

from nicrig.errors import UsageError


def test_the_built_in_maps_load_and_say_what_they_record():
    assert set(probemap.available()) >= {"pci-control", "gmii-probe", "gmii-tx"}
    pci = probemap.load("pci-control")
    assert pci.channels[:3] == ["FRAME#", "IRDY#", "TRDY#"] and pci.where("CLK") == (2, 0)
    roles, bus = probemap.source_roles(pci)
    assert bus["kind"] == "pci" and roles["frame"] == "FRAME#" and roles["clk"] == "CLK"
    gmii = probemap.load("gmii-probe")
    roles, bus = probemap.source_roles(gmii)
    assert bus["kind"] == "gmii" and roles["txd"] == "TXD" and roles["rx_clk"] == "GTX_CLK" and roles["act"] == "LINK_ACT"


@pytest.mark.parametrize("text, message", [
    ("[pod.1]\n0 = 'A'\n0x = 'B'\n", "bits are 0 to 7"),
    ("[pod.1]\n8 = 'A'\n", "bits are 0 to 7"),
    ("[pod.0]\n1 = 'A'\n", "pods are numbered 1"),
    ("[pod.1]\n0 = 'A'\n1 = 'A'\n", "on more than one bit"),
    ("[pod.1]\n0 = 'AD[0]'\n1 = 'AD[2]'\n", "lacks bit"),
    ("[pod.1]\n0 = 'a b'\n", "bad signal name"),
    ("colour = 'red'\n[pod.1]\n0 = 'A'\n", "unknown key"),
    ("description = 'nothing'\n", "no \\[pod.N\\] tables"),
    ("[pod.1]\n0 = 'A'\n[roles]\nframe = 'B'\n", "not a signal of this map"),
    ("[pod.1\n", "not valid TOML"),
])
def test_bad_maps_are_refused_with_the_reason(tmp_path, text, message):
    f = tmp_path / "bad.toml"
    f.write_text(text)
    with pytest.raises(UsageError, match=message):
        probemap.load(f)


def test_unknown_names_list_the_built_in_ones():
    with pytest.raises(UsageError, match="pci-control"):
        probemap.load("no-such-map")


signals = st.dictionaries(st.tuples(st.integers(1, 4), st.integers(0, 7)),
                          st.sampled_from([f"S{i}" for i in range(32)]), min_size=1, max_size=20).filter(
    lambda d: len(set(d.values())) == len(d))


@given(signals, st.integers(0, 300), st.randoms())
def test_levels_to_pod_bytes_to_packed_samples_and_back(sig, n, rnd):
    pm = ProbeMap("t", sig)
    levels = {s: np.array([rnd.randint(0, 1) for _ in range(n)], dtype=np.uint8) for s in pm.channels}
    packed = pack_pods(pm, pod_bytes(pm, levels, n))
    bits = unpack_bits(packed, len(pm.channels))
    for k, name in enumerate(pm.channels):
        assert np.array_equal(bits[:, k], levels[name])


def test_pods_arriving_one_after_the_other_or_interleaved_give_the_same_rows():
    pm = probemap.load("pci-control")
    rng = np.random.default_rng(3)
    pods = {1: rng.integers(0, 256, 1000, dtype=np.uint8), 2: rng.integers(0, 256, 1000, dtype=np.uint8)}
    expected = pack_pods(pm, pods)
    whole: list[np.ndarray] = []
    a = PodAssembler(pm, whole.append)
    a.add(1, pods[1].tobytes())
    assert not whole  # nothing can be written before pod 2's bits of a row are known
    for lo in range(0, 1000, 333):
        a.add(2, pods[2][lo:lo + 333].tobytes())
    assert np.array_equal(np.concatenate(whole), expected)
    batches: list[np.ndarray] = []
    b = PodAssembler(pm, batches.append)
    for lo in range(0, 1000, 250):
        b.add(1, pods[1][lo:lo + 250].tobytes())
        b.add(2, pods[2][lo:lo + 250].tobytes())
    assert len(batches) == 4 and np.array_equal(np.concatenate(batches), expected)


def test_a_pod_that_stopped_early_is_written_with_its_bits_zero():
    pm = probemap.load("pci-control")
    rows: list[np.ndarray] = []
    a = PodAssembler(pm, rows.append)
    a.add(1, b"\xff" * 100)
    a.add(2, b"\xff" * 40)
    assert a.flush_partial() == {1: 100, 2: 40}
    packed = np.concatenate(rows)
    assert len(packed) == 100
    bits = unpack_bits(packed, len(pm.channels))
    clk = pm.channels.index("CLK")
    assert bits[:40, clk].all() and not bits[40:, clk].any() and bits[:, 0].all()
