"""The PCI protocol decoder (decoders/pci), run by the real sigrok-cli.

Captures are written clock by clock from a small bus model that follows the
timing diagrams of the PCI Local Bus Specification 3.0, chapter 3 (address
phase, turnaround, DEVSEL# decode speeds, IRDY#/TRDY# handshakes, target and
master terminations), then stored as .sr files either one sample per clock
(state mode) or at 4 samples per clock with a CLK channel (timing mode).
"""

from __future__ import annotations

import json
import os
import random
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from pcibus import CH32, CH64, CH_CTRL, CMD_NAMES, IDS, Bus, Expect, parity, timing
from sigrok_run import (
    DECODERS_DIR,
    decoder_spec,
    run_sigrok,
    sigrok_cli_available,
    write_session,
)

pytestmark = [
    pytest.mark.sigrok,
    pytest.mark.skipif(not sigrok_cli_available(), reason="needs sigrok-cli"),
]

RECORD_KEYS = {
    "ss", "es", "command", "command_code", "address", "dac", "data_phases", "bytes", "termination",
    "kind", "master_wait_clocks", "target_wait_clocks", "devsel", "wide", "parity_error", "stop", "data",
}


# ---------------------------------------------------------------------------------------------
# Running the decoder
# ---------------------------------------------------------------------------------------------
def spec_for(channels, **options) -> str:
    return decoder_spec("pci", {IDS[c]: c for c in channels}, options)


@dataclass
class Decoded:
    records: list[dict]
    annotations: list


def decode(tmp_path: Path, bus_or_levels, channels=CH32, *, name="cap", clk=False,
           annotations=False, samplerate=33_000_000, **options) -> Decoded:
    levels = bus_or_levels.levels(channels) if isinstance(bus_or_levels, Bus) else bus_or_levels
    chans = list(channels)
    if clk:
        levels = timing(levels)
        chans = ["CLK"] + chans
        samplerate *= 4
    path = write_session(tmp_path / f"{name}.sr", chans, levels, samplerate)
    spec = spec_for(chans, **options)
    res = run_sigrok(path, [spec], binary="pci=records").check()
    records = res.json_lines()
    anns = run_sigrok(path, [spec]).check().annotations if annotations else []
    for r in records:
        assert set(r) == RECORD_KEYS
    return Decoded(records, anns)


def check(rec: dict, exp: Expect, *, spc: int = 1, offset: int = 0, with_data=True) -> None:
    assert rec["ss"] == exp.ss_clock * spc + offset
    assert rec["es"] == exp.es_clock * spc + offset
    assert rec["command_code"] == exp.command_code
    assert rec["command"] == CMD_NAMES[exp.command_code]
    assert rec["address"] == exp.address
    assert rec["dac"] == exp.dac
    assert rec["data_phases"] == len(exp.data)
    assert rec["termination"] == exp.termination
    assert rec["devsel"] == exp.devsel
    assert rec["master_wait_clocks"] == exp.master_wait
    assert rec["target_wait_clocks"] == exp.target_wait
    assert rec["wide"] == exp.wide
    assert rec["stop"] == exp.stop
    if with_data:
        assert rec["data"] == exp.data
        assert rec["bytes"] == exp.bytes


# ---------------------------------------------------------------------------------------------
# Tests
# ---------------------------------------------------------------------------------------------
def test_write_burst_fast_devsel(tmp_path):
    bus = Bus()
    e = bus.txn(0x7, 0xFE000010, [0x11223344, 0x55667788, 0x99AABBCC, 0xDDEEFF00], be=[0, 0, 0xC, 0x1])
    bus.idle(3)
    d = decode(tmp_path, bus, annotations=True, bars="0xfe000000-0xfe01ffff")
    assert len(d.records) == 1
    r = d.records[0]
    check(r, e)
    assert r["bytes"] == 4 + 4 + 2 + 3
    assert (r["master_wait_clocks"], r["target_wait_clocks"]) == (0, 0)
    assert r["kind"] == "csr" and r["parity_error"] is False
    texts = [a.text for a in d.annotations]
    assert "Memory Write 0xfe000010" in texts
    assert any(t.startswith("Write data phase 2: 0x99aabbcc (BE# 0xc, 2 bytes)") for t in texts)
    assert any(t.startswith("Normal completion: 4 data phases") for t in texts)
    assert not [t for t in texts if "error" in t or "?" in t]


@pytest.mark.parametrize("devsel,speed", [(1, "fast"), (2, "medium"), (3, "slow"), (4, "subtractive")])
def test_devsel_speeds_read_and_write(tmp_path, devsel, speed):
    bus = Bus()
    ew = bus.txn(0x7, 0x1000, [0xCAFEF00D], devsel=devsel)
    er = bus.txn(0x6, 0x2000, [0x12345678, 0x9ABCDEF0], devsel=devsel)
    bus.idle(2)
    recs = decode(tmp_path, bus).records
    assert [r["devsel"] for r in recs] == [speed, speed]
    check(recs[0], ew)
    check(recs[1], er)
    # Write: the target holds TRDY# off until it asserts DEVSEL#; read: at least the turnaround clock.
    assert recs[0]["target_wait_clocks"] == devsel - 1
    assert recs[1]["target_wait_clocks"] == max(devsel, 2) - 1


def test_wait_states_both_sides(tmp_path):
    bus = Bus()
    e = bus.txn(0x7, 0x4000, [1, 2, 3], mwait=[0, 2, 0], twait=[1, 0, 3], devsel=2)
    er = bus.txn(0xE, 0x8000, [4, 5], mwait=[1, 1], twait=[0, 2])
    bus.idle(2)
    recs = decode(tmp_path, bus).records
    check(recs[0], e)
    check(recs[1], er)
    assert (recs[0]["master_wait_clocks"], recs[0]["target_wait_clocks"]) == (2, 5)
    # MRL: on phase 0 the turnaround clock is also the master's wait (IRDY# off): both wait;
    # phase 1: one clock neither is ready, then one target wait (TRDY# 2 clocks after the phase start)
    assert (recs[1]["master_wait_clocks"], recs[1]["target_wait_clocks"]) == (2, 3)


@pytest.mark.parametrize("term,phase,expected", [
    ("retry", 0, "retry"),
    ("disconnect_with_data", 1, "disconnect_with_data"),
    ("disconnect_with_data", 3, "disconnect_with_data"),   # STOP# on the master's last phase
    ("disconnect_without_data", 2, "disconnect_without_data"),
    ("target_abort", 0, "target_abort"),
    ("target_abort", 1, "target_abort"),
])
def test_target_terminations(tmp_path, term, phase, expected):
    bus = Bus()
    e = bus.txn(0x7, 0x10000, [10, 11, 12, 13], term=term, term_phase=phase, devsel=2, twait=[1, 0, 1, 0])
    e2 = bus.txn(0x6, 0x20000, [20], gap=3)
    recs = decode(tmp_path, bus).records
    assert len(recs) == 2
    check(recs[0], e)
    check(recs[1], e2)
    r = recs[0]
    assert r["termination"] == expected and r["stop"] is True
    assert r["data_phases"] == {"retry": 0, "target_abort": phase}.get(
        term, phase + (term == "disconnect_with_data"))


def test_master_abort(tmp_path):
    bus = Bus()
    e1 = bus.txn(0xA, 0x00000800, [0], devsel=None)      # config read, nobody home
    e2 = bus.txn(0x7, 0xD0000000, [1, 2], devsel=None)   # burst write, no target
    e3 = bus.txn(0x1, 0x0, [0x00120001], devsel=None)     # special cycle: always master abort
    bus.idle(2)
    d = decode(tmp_path, bus, annotations=True)
    for r, e in zip(d.records, (e1, e2, e3)):
        check(r, e)
        assert r["termination"] == "master_abort" and r["devsel"] == "none" and r["data_phases"] == 0
    assert d.records[0]["kind"] == "config"
    assert not [a for a in d.annotations if "Early master abort" in a.text or "before the DEVSEL#" in a.text]


def test_all_command_codes(tmp_path):
    bus = Bus()
    exps = []
    for code in range(16):
        if code == 0xD:
            continue
        devsel = None if code == 0x1 else 2
        exps.append(bus.txn(code, 0x1000 * code + 4, [0xA0 + code], devsel=devsel))
    bus.idle(2)
    d = decode(tmp_path, bus, annotations=True)
    assert len(d.records) == 15
    for r, e in zip(d.records, exps):
        check(r, e)
    assert [r["command"] for r in d.records] == [n for i, n in enumerate(CMD_NAMES) if i != 0xD]
    assert len([a for a in d.annotations if a.text.startswith("Reserved bus command")]) == 4


def test_dual_address_cycle(tmp_path):
    bus = Bus()
    e = bus.txn(0x6, 0x0000001234567880, [0xAAAA5555, 0x5555AAAA], dac=True, devsel=1)
    ew = bus.txn(0x7, 0xFFFFFFFF00000000, [7], dac=True, devsel=3)
    bus.idle(2)
    d = decode(tmp_path, bus, annotations=True)
    r = d.records[0]
    check(r, e)
    assert r["dac"] is True and r["address"] == 0x1234567880 and r["command"] == "Memory Read"
    assert r["devsel"] == "fast"          # counted from the second address phase
    check(d.records[1], ew)
    assert d.records[1]["devsel"] == "slow"
    assert "Memory Read 0x0000001234567880 [DAC]" in [a.text for a in d.annotations]


def test_64bit_transfers(tmp_path):
    bus = Bus()
    e = bus.txn(0x7, 0xFE000100, [0x1122334455667788, 0x99AABBCCDDEEFF00], be=[0x00, 0xF0], wide=True)
    er = bus.txn(0xC, 0x30000000, [0x0123456789ABCDEF, 0xFEDCBA9876543210], wide=True, devsel=2)
    e32 = bus.txn(0x7, 0x40000000, [0x12345678, 0x9ABCDEF0], wide=True, ack64=False)
    ed = bus.txn(0x7, 0x0000000500000040, [0xDEADBEEF00C0FFEE], wide=True, dac=True)
    ema = bus.txn(0x6, 0x50000000, [0, 0], wide=True, devsel=None)   # nobody declined REQ64#
    bus.idle(2)
    recs = decode(tmp_path, bus, CH64, annotations=False).records
    assert len(recs) == 5 and recs[4]["wide"] is True and recs[4]["termination"] == "master_abort"
    for r, x in zip(recs, (e, er, e32, ed, ema)):
        check(r, x)
        assert r["parity_error"] is False
    assert recs[0]["wide"] and recs[0]["bytes"] == 8 + 4
    assert recs[2]["wide"] is False and recs[2]["bytes"] == 8
    assert recs[3]["address"] == 0x500000040 and recs[3]["dac"] and recs[3]["wide"]


def test_parity_errors(tmp_path):
    bus = Bus()
    ok = bus.txn(0x7, 0x1000, [1, 2, 3])
    e_data = bus.txn(0x7, 0x2000, [4, 5, 6])
    bus.at(e_data.ss_clock + 2 + 1).par_flip = True      # phase 1 (clock ss+2): PAR on the next clock
    e_addr = bus.txn(0x6, 0x3000, [7])
    bus.at(e_addr.ss_clock + 1).par_flip = True
    e_perr = bus.txn(0x7, 0x4000, [8])                   # PAR right, but the target reports PERR#
    bus.at(e_perr.ss_clock + 1 + 2).perr = True
    e_last = bus.txn(0x6, 0x5000, [9, 10])                # PERR# for the last phase, after the end
    bus.at(e_last.es_clock - 1 + 2).perr = True
    bus.idle(3)
    d = decode(tmp_path, bus, annotations=True)
    assert [r["parity_error"] for r in d.records] == [False, True, True, True, True]
    for r, e in zip(d.records, (ok, e_data, e_addr, e_perr, e_last)):
        check(r, e)
    texts = [a.text for a in d.annotations]
    assert "Data parity error (PAR wrong)" in texts
    assert "Address parity error (PAR wrong)" in texts
    assert texts.count("PERR#: data parity error reported") == 2
    # Without PERR# probed the record is out one clock after the end.
    d2 = decode(tmp_path, bus, [c for c in CH32 if c != "PERR#"], name="noperr")
    assert [r["parity_error"] for r in d2.records] == [False, True, True, False, False]


def test_back_to_back(tmp_path):
    bus = Bus()
    e1 = bus.txn(0x7, 0x100, [1], gap=0)           # fast back-to-back: next FRAME# right after
    e2 = bus.txn(0x7, 0x104, [2, 3], gap=0)
    e3 = bus.txn(0x7, 0x10C, [4], gap=1)           # one turnaround clock
    e4 = bus.txn(0x6, 0x200, [5, 6], gap=1)
    e5 = bus.txn(0x6, 0x208, [7], devsel=None, gap=2)
    d = decode(tmp_path, bus, annotations=True)
    assert len(d.records) == 5
    for r, e in zip(d.records, (e1, e2, e3, e4, e5)):
        check(r, e)
    assert d.records[0]["es"] == d.records[1]["ss"]
    assert not [a for a in d.annotations if "?" in a.text or "outside" in a.text]


def test_control_signals_only(tmp_path):
    bus = Bus()
    e1 = bus.txn(0x7, 0x100, [1, 2, 3], mwait=[0, 1, 0], twait=[2, 0, 0], devsel=2)
    e2 = bus.txn(0x6, 0x200, [4, 5], term="disconnect_with_data", term_phase=0)
    e3 = bus.txn(0x6, 0x300, [6], devsel=None)
    bus.idle(2)
    recs = decode(tmp_path, bus, CH_CTRL).records
    assert len(recs) == 3
    for r, e in zip(recs, (e1, e2, e3)):
        assert r["command"] is None and r["command_code"] is None and r["address"] is None
        assert r["bytes"] is None and r["data"] == [] and r["kind"] == "unknown"
        assert r["data_phases"] == len(e.data) and r["termination"] == e.termination
        assert (r["master_wait_clocks"], r["target_wait_clocks"]) == (e.master_wait, e.target_wait)
        assert r["devsel"] == e.devsel and (r["ss"], r["es"]) == (e.ss_clock, e.es_clock)


def test_gnt_classification_without_ad(tmp_path):
    bus = Bus()
    bus.txn(0x7, 0x100, [1], master=False, gap=2)
    bus.txn(0x7, 0x200, [2, 3], master=True, gap=2)
    bus.txn(0x6, 0x300, [4], master=True, gap=0)       # GNT# then fast back-to-back by the host
    bus.txn(0x6, 0x400, [5], master=False, gap=2)
    recs = decode(tmp_path, bus, CH_CTRL + ["GNT#"]).records
    assert [r["kind"] for r in recs] == ["csr", "dma", "dma", "csr"]


def test_bar_msi_config_classification(tmp_path):
    bus = Bus()
    # (command, address, mastered by the device (its GNT#), kind)
    cases = [
        (0x7, 0xFE000100, False, "csr"), (0x6, 0xFE01FFFC, False, "csr"), (0x6, 0xFE020000, True, "dma"),
        (0x7, 0x12345000, True, "dma"), (0xF, 0x00100000, True, "dma"), (0x7, 0xFEE00000, True, "msi"),
        (0x6, 0xFEE00000, True, "dma"), (0x2, 0xE804, False, "csr"), (0x3, 0x3F8, False, "unknown"),
        (0xA, 0x80000004, False, "config"), (0xB, 0x00010010, False, "config"), (0x0, 0x0, False, "unknown"),
        # neither the device's nor addressed to it: another bus master's DMA
        (0x7, 0x20000000, False, "unknown"), (0xC, 0x00100000, False, "unknown"),
    ]
    for code, addr, master, _ in cases:
        bus.txn(code, addr, [0], master=master, gap=2)
    bus.idle(2)
    recs = decode(tmp_path, bus, bars="0xfe000000-0xfe01ffff;0xe800-0xe81f").records
    assert [r["kind"] for r in recs] == [k for *_, k in cases]
    # Without GNT#, every memory access outside the BARs is taken for the device's DMA.
    no_gnt = [c for c in CH32 if c != "GNT#"]
    recs = decode(tmp_path, bus, no_gnt, name="nognt", bars="0xfe000000-0xfe01ffff;0xe800-0xe81f").records
    assert [r["kind"] for r in recs][-2:] == ["dma", "dma"]
    # Without BARs, GNT# tells the host's accesses (csr) from the device's own (dma / msi).
    bus2 = Bus()
    bus2.txn(0x7, 0xFE000100, [0], master=False, gap=2)
    bus2.txn(0x7, 0x12345000, [0], master=True, gap=2)
    bus2.txn(0x7, 0xFEE00000, [0], master=True, gap=2)
    bus2.txn(0x2, 0xE800, [0], master=False, gap=2)
    recs2 = decode(tmp_path, bus2, name="nobars").records
    assert [r["kind"] for r in recs2] == ["csr", "dma", "msi", "csr"]
    recs3 = decode(tmp_path, bus2, name="msiopt", msi="0x12345000+0x1000").records
    assert [r["kind"] for r in recs3] == ["csr", "msi", "dma", "csr"]


def test_timing_mode_with_clk(tmp_path):
    bus = Bus()
    exps = [
        bus.txn(0x7, 0xFE000010, [1, 2, 3], mwait=[0, 1, 0], twait=[0, 0, 2]),
        bus.txn(0x6, 0x2000, [0xCAFEBABE], devsel=3),
        bus.txn(0x6, 0x3000, [4, 5, 6], term="disconnect_without_data", term_phase=1, gap=0),
        bus.txn(0x7, 0x4000, [7], devsel=None),
        bus.txn(0x6, 0x0000000700000000, [8], dac=True),
    ]
    bus.at(exps[1].ss_clock + 3 + 1).par_flip = True
    bus.idle(2)
    state = decode(tmp_path, bus, name="state").records
    timed = decode(tmp_path, bus, name="timed", clk=True, annotations=True)
    assert len(timed.records) == len(exps) == len(state)
    for r, s, e in zip(timed.records, state, exps):
        check(r, e, spc=4, offset=2)
        assert {k: v for k, v in r.items() if k not in ("ss", "es")} == \
            {k: v for k, v in s.items() if k not in ("ss", "es")}
    assert [r["parity_error"] for r in timed.records] == [False, True, False, False, False]
    assert not [a for a in timed.annotations if "Glitch" in a.text]
    # clock=state on the same file: each sample would be a clock -> no sensible decode, no crash
    path = write_session(tmp_path / "t2.sr", ["CLK"] + CH32, timing(bus.levels(CH32)), 132e6)
    run_sigrok(path, [spec_for(["CLK"] + CH32, clock="state")], binary="pci=records").check()


def test_timing_mode_glitch_and_interrupts(tmp_path):
    bus = Bus()
    e = bus.txn(0x7, 0x100, [1, 2], twait=[2, 0])
    bus.idle(4)
    for k in range(len(bus.clocks) - 6, len(bus.clocks) - 2):
        bus.at(k).inta = True
    bus.idle(2)
    levels = timing(bus.levels(CH32), tco=1)
    frame = 1 + CH32.index("FRAME#")
    glitch_at = 4                                   # between the edges of clocks 0 and 1 (idle bus)
    levels[glitch_at, frame] ^= 1
    irdy = 1 + CH32.index("IRDY#")
    mid = 4 * (e.ss_clock + 2) + 0                  # a one-sample IRDY# spike between two edges
    levels[mid, irdy] ^= 1
    path = write_session(tmp_path / "g.sr", ["CLK"] + CH32, levels, 132e6)
    spec = spec_for(["CLK"] + CH32)
    recs = run_sigrok(path, [spec], binary="pci=records").check().json_lines()
    assert len(recs) == 1
    check(recs[0], e, spc=4, offset=2)
    anns = run_sigrok(path, [spec]).check().annotations
    glitches = [a for a in anns if a.text.startswith("Glitch")]
    assert [g.text.split(":")[0] for g in glitches] == ["Glitch on FRAME#", "Glitch on IRDY#"]
    assert glitches[0].ss == glitch_at
    ints = [a for a in anns if a.text.startswith("INTA#")]
    assert [a.text for a in ints] == ["INTA# asserted", "INTA# deasserted"]


def test_protocol_violation_warnings(tmp_path):
    bus = Bus()
    bus.at(3).irdy = True                            # IRDY# on an idle bus
    bus.idle(2)
    e = bus.txn(0x7, 0x100, [1, 2])
    bus.at(e.ss_clock + 1).devsel = False            # TRDY# before DEVSEL#
    start = len(bus.clocks)                          # FRAME# for one clock, never IRDY#
    bus.at(start).frame = True
    bus.at(start).cbe = 0x7
    bus.idle(3)
    d = decode(tmp_path, bus, annotations=True)
    texts = [a.text for a in d.annotations]
    assert "IRDY# asserted outside a transaction" in texts
    assert "TRDY# asserted without DEVSEL#" in texts
    assert "FRAME# deasserted without IRDY# asserted" in texts
    assert len(d.records) == 2 and d.records[1]["termination"] == "master_abort"


def test_capture_starting_mid_transaction_and_truncated(tmp_path):
    bus = Bus()
    exps = [bus.txn(0x7, 0x100 * i, [i, i + 1, i + 2], twait=[0, 1, 0]) for i in range(1, 5)]
    bus.idle(2)
    levels = bus.levels(CH32)
    full = decode(tmp_path, levels, name="full").records
    assert len(full) == 4
    # Starts inside transaction 1, ends inside transaction 4.
    cut = levels[exps[0].ss_clock + 2: exps[3].ss_clock + 3]
    d = decode(tmp_path, cut, name="cut", annotations=True)
    off = exps[0].ss_clock + 2
    assert [(r["ss"] + off, r["data"]) for r in d.records] == [(r["ss"], r["data"]) for r in full[1:3]]
    assert any(a.text.startswith("Capture starts inside a transaction") for a in d.annotations)
    # Records are out once PERR# (two clocks after the last data phase) was seen ...
    assert len(decode(tmp_path, levels[: exps[1].es_clock + 2], name="short").records) == 2
    assert len(decode(tmp_path, levels[: exps[1].es_clock + 1], name="short1").records) == 1
    # ... or, without PERR# probed, one clock after it (PAR).
    no_perr = [c for c in CH32 if c != "PERR#"]
    lv = Bus.levels(bus, no_perr)[: exps[1].es_clock + 1]
    assert len(decode(tmp_path, lv, no_perr, name="short2").records) == 2


def test_python_output_for_stacked_decoders(tmp_path):
    ddir = tmp_path / "decoders"
    (ddir / "pcitap").mkdir(parents=True)
    os.symlink(DECODERS_DIR / "pci", ddir / "pci")
    (ddir / "pcitap" / "__init__.py").write_text("'''Test tap on pci's Python output.'''\nfrom .pd import Decoder\n")
    (ddir / "pcitap" / "pd.py").write_text(
        "import json\nimport sigrokdecode as srd\n"
        "class Decoder(srd.Decoder):\n"
        "    api_version = 3\n    id = 'pcitap'\n    name = 'pcitap'\n    longname = 'pcitap'\n"
        "    desc = 'test'\n    license = 'gplv3+'\n    inputs = ['pci']\n    outputs = []\n"
        "    tags = ['PC']\n    annotations = (('rec', 'Record'),)\n"
        "    def reset(self):\n        pass\n"
        "    def start(self):\n        self.out_ann = self.register(srd.OUTPUT_ANN)\n"
        "    def decode(self, ss, es, data):\n"
        "        self.put(ss, es, self.out_ann, [0, ['REC ' + json.dumps(data, sort_keys=True)]])\n")
    bus = Bus()
    bus.txn(0x7, 0xFE000000, [5, 6])
    bus.txn(0x6, 0x1000, [7], devsel=None)
    bus.idle(2)
    path = write_session(tmp_path / "s.sr", CH32, bus.levels(CH32), 33e6)
    spec = spec_for(CH32, bars="0xfe000000+0x20000")
    recs = run_sigrok(path, [spec], binary="pci=records").check().json_lines()
    res = run_sigrok(path, [spec, "pcitap"], annotations="pcitap", decoders_dir=ddir).check()
    tapped = [json.loads(a.text[4:]) for a in res.annotations if a.text.startswith("REC ")]
    assert tapped == recs and len(recs) == 2


def test_bad_options_do_not_crash(tmp_path):
    bus = Bus()
    bus.txn(0x7, 0x100, [1])
    bus.idle(2)
    d = decode(tmp_path, bus, CH_CTRL, annotations=True, bars="0xzz-1;  ;5-3;0xe800+32", clock="clk")
    assert len(d.records) == 1
    texts = [a.text for a in d.annotations]
    assert "Ignored bad address range option entry '0xzz-1'" in texts
    assert "Ignored bad address range option entry '5-3'" in texts
    assert any(t.startswith("clock=clk but CLK is not connected") for t in texts)


@pytest.mark.parametrize("clk", [False, True])
def test_fuzz_random_bits(tmp_path, clk):
    rng = np.random.default_rng(99 + clk)
    chans = CH64 + ["REQ#", "INTB#", "INTC#", "INTD#"] + (["CLK"] if clk else [])
    n = 40_000
    # Mostly-high control lines with random activity, plus uniformly random bits.
    bits = rng.integers(0, 2, size=(n, len(chans)), dtype=np.uint8)
    sticky = rng.random((n, 5)) < 0.7
    bits[:, :5] |= sticky.astype(np.uint8)
    path = write_session(tmp_path / "fuzz.sr", chans, bits, 100e6)
    ids = dict(IDS, **{"REQ#": "req", "INTB#": "intb", "INTC#": "intc", "INTD#": "intd"})
    spec = decoder_spec("pci", {ids[c]: c for c in chans}, {"bars": "0-0xffffffff"})
    for kw in ({"binary": "pci=records"}, {"annotations": "pci"}):
        res = run_sigrok(path, [spec], **kw)
        assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
    recs = run_sigrok(path, [spec], binary="pci=records").json_lines()
    assert recs and all(set(r) == RECORD_KEYS for r in recs)


def test_fuzz_mutated_protocol(tmp_path):
    """Valid traffic with flipped control bits and cuts: warnings, never an exception."""
    rng = random.Random(5)
    bus = Bus()
    for i in range(40):
        code = rng.choice([0x6, 0x7, 0xC, 0xE, 0xF, 0x2, 0x3, 0xA, 0xB])
        term = rng.choice(["normal"] * 4 + ["retry", "disconnect_with_data", "disconnect_without_data",
                                             "target_abort"])
        n = rng.randint(1, 5)
        bus.txn(code, rng.getrandbits(32) & ~3, [rng.getrandbits(32) for _ in range(n)],
                devsel=rng.choice([1, 2, 3, 4, None]), term=term, term_phase=rng.randrange(n),
                mwait=[rng.choice([0, 0, 1, 3]) for _ in range(n)],
                twait=[rng.choice([0, 0, 1, 2]) for _ in range(n)], dac=rng.random() < 0.2,
                gap=rng.choice([0, 1, 2, 5]))
    levels = bus.levels(CH32)
    clean = decode(tmp_path, levels, name="clean")
    assert len(clean.records) == 40
    path = write_session(tmp_path / "clean.sr", CH32, levels, 33e6)
    warnings = run_sigrok(path, [spec_for(CH32)], annotations="pci=warning").check().annotations
    assert warnings == []
    nrng = np.random.default_rng(3)
    mutated = levels.copy()
    flips = nrng.random((len(levels), 5)) < 0.03
    mutated[:, :5] ^= flips.astype(np.uint8)
    for lv, name, clk in ((mutated, "mut", False), (mutated[17:-9], "mutcut", False),
                          (mutated[: len(mutated) // 2], "mutclk", True)):
        chans = (["CLK"] if clk else []) + CH32
        data = timing(lv) if clk else lv
        path = write_session(tmp_path / f"{name}.sr", chans, data, 33e6)
        for kw in ({"binary": "pci=records"}, {"annotations": "pci"}):
            res = run_sigrok(path, [spec_for(chans)], **kw)
            assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
