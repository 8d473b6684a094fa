"""Full-width values: a PCI address of 64 bits (a dual address cycle above 2^63) round-trips exactly
through the decoded table, every engine, ``nicrig events`` (text and JSON), the GUI's labels and the
exports of the samples; random bits into every decoder give tables, never a crash."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nicrig.acquisition.capture import CaptureSet, SourceSpec, pack_bits
from nicrig.acquisition.sim import gmii, pci_bus
from nicrig.decoders import notation, tables
from nicrig.decoders.batch import decode_files
from nicrig.gui.lanes import pci_labels
from pcibus import Bus

#: The issue's address: a dual address cycle's 64 bits with the top one set (PCI 3.0 §3.9).
HIGH = 0xFFA298ED94DC4695
ADDRESSES = [0xFE000010, HIGH, 0x1_0000_0000, 0xFFFF_FFFF_FFFF_FFF0]
CLOCK_PS = 15_000


def nicrig(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "nicrig", *map(str, args)], capture_output=True, text=True,
                          timeout=300)


def _pci_channels() -> tuple[list[str], dict[str, str]]:
    """A 64-bit state-mode PCI capture's channels and roles (REQ# left out: the test bus does not draw it)."""
    channels = [c for c in pci_bus.channels_for(64, True, False) if c != "REQ#"]
    roles = {r: n for r, n in pci_bus.roles_for(64, True, False).items() if n != "REQ#"}
    return channels, roles


@pytest.fixture(scope="module")
def dac_capture(tmp_path_factory) -> Path:
    bus = Bus()
    bus.txn(0x7, ADDRESSES[0], [0x1234])                       # a 32-bit memory write
    bus.txn(0x6, ADDRESSES[1], [0xDEADBEEF, 1], dac=True)      # reads above 2^63 by dual address cycles
    bus.txn(0x7, ADDRESSES[2], [5], dac=True)
    bus.txn(0x6, ADDRESSES[3], [7], dac=True)
    bus.idle(4)
    channels, roles = _pci_channels()
    rows = pack_bits(bus.levels(channels))
    path = tmp_path_factory.mktemp("wide") / "dac.h5"
    with CaptureSet.create(path) as cs:
        cs.add_source(SourceSpec("send_pci", channels, "state", samplerate_hz=66.67e6, roles=roles,
                                 bus={"kind": "pci", "width_bits": 64, "clock_hz": 66.67e6})
                      ).append(rows, np.arange(len(rows), dtype=np.int64) * CLOCK_PS)
    r = nicrig("decode", path)
    assert r.returncode == 0, r.stderr
    return path


def _pci(path: Path) -> np.ndarray:
    with CaptureSet.open(path) as cs:
        return cs.read_table("decoded/send_pci/pci")


def test_the_table_holds_64_bit_addresses_exactly(dac_capture):
    t = _pci(dac_capture)
    assert t.dtype["address"] == np.dtype("<u8")
    assert [int(a) for a in t["address"]] == ADDRESSES
    assert t["has_address"].all() and t["dac"].tolist() == [False, True, True, True]


@pytest.mark.parametrize("engine", ["reference", "sigrok"])
def test_every_engine_gives_the_same_addresses(dac_capture, tmp_path, engine):
    path = tmp_path / "e.h5"
    path.write_bytes(dac_capture.read_bytes())
    r = nicrig("decode", path, "--engine", engine)
    assert r.returncode == 0, r.stderr
    assert _pci(path).tobytes() == _pci(dac_capture).tobytes()


def test_events_print_the_addresses_exactly(dac_capture):
    r = nicrig("events", dac_capture, "--source", "send_pci", "--decoder", "pci", "--json")
    assert r.returncode == 0, r.stderr
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    assert [int(row["address"], 16) for row in rows] == ADDRESSES
    assert rows[1]["address"] == "0xffa298ed94dc4695"
    text = nicrig("events", dac_capture, "--source", "send_pci", "--decoder", "pci")
    assert text.returncode == 0 and "0xffa298ed94dc4695" in text.stdout and "0xfffffffffffffff0" in text.stdout
    one = nicrig("events", dac_capture, "--source", "send_pci", "--decoder", "pci", "--json",
                 "--where", f"address={HIGH:#x}")
    assert [json.loads(line)["address"] for line in one.stdout.splitlines()] == ["0xffa298ed94dc4695"]


def test_gui_labels_show_the_addresses_exactly(dac_capture):
    table = _pci(dac_capture)
    assert all(f"{a:#x}" in pci_labels(table[i])[0] for i, a in enumerate(ADDRESSES))


def test_unknown_addresses_old_and_new(tmp_path):
    """No AD probed: the address is unknown, empty in the notation; tables of layout 1 (signed, -1) read too."""
    new = np.zeros(2, [("address", "<u8"), ("has_address", "?"), ("dac", "?")])
    new["address"], new["has_address"] = [0, HIGH], [False, True]
    assert notation.column_values(new, "address") == [None, "0xffa298ed94dc4695"]
    assert notation.select(new, ["address="]).tolist() == new[:1].tolist()
    old = np.array([(-1, False), (0xFE000010, False)], [("address", "<i8"), ("dac", "?")])
    assert notation.column_values(old, "address") == [None, "0xfe000010"]
    assert tables.address_known(old).tolist() == [False, True]


@pytest.mark.parametrize("suffix", [".sr", ".vcd"])
def test_exports_keep_every_bit_of_the_address_lines(dac_capture, tmp_path, suffix):
    out = tmp_path / f"send{suffix}"
    assert nicrig("export", dac_capture, "--source", "send_pci", "-o", out).returncode == 0
    back = tmp_path / "back.h5"
    r = nicrig("import", out, "-o", back, "--source", "send_pci", *(["--sample-rate", "66.67MHz"] if suffix == ".sr"
                                                                   else []))
    assert r.returncode == 0, r.stderr
    with CaptureSet.open(dac_capture) as a, CaptureSet.open(back) as b:
        src, got = a.source("send_pci"), b.source("send_pci")
        assert np.array_equal(got.read_vector("AD"), src.read_vector("AD"))
        assert int(src.read_vector("AD").max()) >= 1 << 63


# -- random bits into every decoder -----------------------------------------------------------------
def _random_set(path: Path, seed: int, n: int, density: float) -> None:
    """Every source kind nicrig decodes, each with random levels that toggle at ``density`` per sample."""
    rng = np.random.default_rng(seed)

    def levels(width: int) -> np.ndarray:
        flips = rng.random((n, width)) < density
        return (rng.integers(0, 2, width) ^ (np.cumsum(flips, axis=0) & 1)).astype(np.uint8)

    stamps = np.arange(n, dtype=np.int64) * 8000
    pci_channels, pci_roles = _pci_channels()
    probe = [*gmii.CHANNELS, "LINK_ACT"]
    with CaptureSet.create(path) as cs:
        cs.add_source(SourceSpec("send_pci", pci_channels, "state", samplerate_hz=66.67e6, roles=pci_roles,
                                 bus={"kind": "pci", "width_bits": 64, "clock_hz": 66.67e6})
                      ).append(pack_bits(levels(len(pci_channels))), stamps)
        cs.add_source(SourceSpec("probe", probe, "state", samplerate_hz=125e6, roles={**gmii.ROLES, "act": "LINK_ACT"},
                                 bus={"kind": "gmii", "link_rate_bps": 1e9})
                      ).append(pack_bits(levels(len(probe))), stamps)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.integers(0, 2**32 - 1), st.integers(200, 4000), st.sampled_from([0.5, 0.05, 0.005]))
def test_random_bits_into_every_decoder_give_tables(tmp_path, seed, n, density):
    path = tmp_path / f"r{seed}.h5"
    _random_set(path, seed, n, density)
    (result,) = decode_files([path], force=True)
    assert result.error is None, result.error
    with CaptureSet.open(path) as cs:
        names = cs.table_names()
        for table in ("decoded/send_pci/pci", "decoded/send_pci/irq", "decoded/probe/ethernet",
                      "decoded/probe/linkactivity"):
            assert table in names, names
            t = cs.read_table(table)
            assert np.all(t["ss"] <= t["es"]) and np.all((t["ss"] >= 0) & (t["es"] <= n))
        pci = cs.read_table("decoded/send_pci/pci")
        assert pci.dtype["address"] == np.dtype("<u8")
    path.unlink()
