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
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
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

READ_CMDS = {0x0, 0x2, 0x6, 0xA, 0xC, 0xE}
CMD_NAMES = [
    "Interrupt Acknowledge", "Special Cycle", "I/O Read", "I/O Write", "Reserved", "Reserved",
    "Memory Read", "Memory Write", "Reserved", "Reserved", "Configuration Read",
    "Configuration Write", "Memory Read Multiple", "Dual Address Cycle", "Memory Read Line",
    "Memory Write and Invalidate",
]
RECORD_KEYS = {
    "ss", "es", "command", "command_code", "address", "dac", "data_phases", "bytes", "termination",
    "kind", "master_wait_clocks", "target_wait_clocks", "devsel", "wide", "parity_error", "stop", "data",
}

# ---------------------------------------------------------------------------------------------
# Channels: capture names and the decoder's channel ids
# ---------------------------------------------------------------------------------------------
CTRL = ["FRAME#", "IRDY#", "TRDY#", "DEVSEL#", "STOP#"]
AD = [f"AD[{i}]" for i in range(64)]
CBE = [f"C/BE#[{i}]" for i in range(8)]
MISC = ["PAR", "PAR64", "REQ64#", "ACK64#", "GNT#", "PERR#", "INTA#"]

CH32 = CTRL + AD[:32] + CBE[:4] + ["PAR", "GNT#", "PERR#", "INTA#"]
CH64 = CTRL + AD + CBE + MISC
CH_CTRL = CTRL

IDS = {"FRAME#": "frame", "IRDY#": "irdy", "TRDY#": "trdy", "DEVSEL#": "devsel", "STOP#": "stop",
       "CLK": "clk", "PAR": "par", "PAR64": "par64", "REQ64#": "req64", "ACK64#": "ack64",
       "GNT#": "gnt", "PERR#": "perr", "INTA#": "inta"}
IDS.update({f"AD[{i}]": f"ad{i}" for i in range(64)})
IDS.update({f"C/BE#[{i}]": f"cbe{i}" for i in range(8)})


def parity(x: int) -> int:
    return bin(x).count("1") & 1


# ---------------------------------------------------------------------------------------------
# Bus model: one Clk per rising CLK edge, signals as "asserted" booleans
# ---------------------------------------------------------------------------------------------
@dataclass
class Clk:
    frame: bool = False
    irdy: bool = False
    trdy: bool = False
    devsel: bool = False
    stop: bool = False
    req64: bool = False
    ack64: bool = False
    gnt: bool = False
    perr: bool = False
    inta: bool = False
    ad: int = 0
    cbe: int = 0xFF
    par_flip: bool = False
    par64_flip: bool = False


@dataclass
class Expect:
    """What the model says a transaction is (its own bookkeeping, not the decoder's)."""
    ss_clock: int
    es_clock: int
    command_code: int
    address: int
    data: list[int] = field(default_factory=list)
    bytes: int = 0
    termination: str = "normal"
    devsel: str = "fast"
    master_wait: int = 0
    target_wait: int = 0
    dac: bool = False
    wide: bool = False
    stop: bool = False


class Bus:
    def __init__(self, idle: int = 2):
        self.clocks: list[Clk] = []
        self.junk = random.Random(1234)
        self.idle(idle)

    def _junk(self) -> int:
        return self.junk.getrandbits(64)

    def idle(self, n: int = 1) -> None:
        for _ in range(n):
            self.clocks.append(Clk(ad=self._junk(), cbe=self.junk.getrandbits(8)))

    def at(self, k: int) -> Clk:
        while len(self.clocks) <= k:
            self.clocks.append(Clk(ad=self._junk(), cbe=self.junk.getrandbits(8)))
        return self.clocks[k]

    def txn(self, cmd: int, addr: int, data=(0,), *, be=0x0, devsel: int | None = 1,
            mwait=None, twait=None, term: str = "normal", term_phase: int | None = None,
            dac: bool = False, wide: bool = False, ack64: bool = True, master: bool = False,
            gap: int = 1) -> Expect:
        """Append one transaction (and ``gap`` idle clocks after it) the way the spec draws it.

        ``devsel``: clocks from the (last) address phase to DEVSEL# (1 fast .. 4 subtractive),
        None: no target (master abort). ``mwait``/``twait``: per data phase, clocks the master /
        target holds IRDY# / TRDY# off before being ready. ``term``: the target's termination
        at data phase ``term_phase`` (retry, disconnect_with_data, disconnect_without_data,
        target_abort). ``master``: the device's GNT# is asserted the clock before FRAME#.
        """
        data = list(data)
        n = len(data)
        read = cmd in READ_CMDS
        mwait = list(mwait or [0] * n)
        twait = list(twait or [0] * n)
        bes = be if isinstance(be, list) else [be] * n
        wide_xfer = wide and ack64 and devsel is not None
        start = len(self.clocks)
        if master:
            self.at(start - 1).gnt = True
        mask = (1 << 32) - 1

        # Address phase(s).
        addr_clocks = [start, start + 1] if dac else [start]
        first = self.at(start)
        first.frame, first.req64 = True, wide
        first.ad = (addr & mask) | ((addr >> 32) << 32 if wide and dac else 0)
        first.cbe = (0xD if dac else cmd) | (cmd << 4 if wide else 0xF0)
        if dac:
            second = self.at(start + 1)
            second.frame, second.req64 = True, wide
            second.ad = (addr >> 32) | ((addr >> 32) << 32 if wide else 0)
            second.cbe = cmd | (cmd << 4 if wide else 0xF0)
        last_addr = addr_clocks[-1]

        exp = Expect(ss_clock=start, es_clock=0, command_code=cmd, address=addr, dac=dac,
                     wide=wide and (ack64 or devsel is None))
        if devsel is None:
            return self._master_abort(exp, last_addr, mwait, data, bes, wide, read, gap)
        exp.devsel = ["fast", "medium", "slow", "subtractive"][devsel - 1]
        devsel_at = last_addr + devsel
        earliest = max(devsel_at, last_addr + 2) if read else devsel_at

        k_term = None if term == "normal" else (term_phase if term_phase is not None else 0)
        ps = last_addr + 1
        final = None
        phases = n if k_term is None else k_term + 1
        for i in range(phases):
            m_ready = ps + mwait[i]
            t_ready = max(ps, earliest) + twait[i]
            done = max(m_ready, t_ready)
            last_wanted = i == n - 1
            stopping = k_term == i
            with_data = not stopping or term == "disconnect_with_data"
            if stopping and term == "target_abort" and t_ready <= devsel_at:
                t_ready = devsel_at + 1            # DEVSEL# is asserted before a target abort
                done = max(m_ready, t_ready)
            for k in range(ps, done + 1):
                c = self.at(k)
                # FRAME# goes with IRDY# on the last phase, or as soon as IRDY# is asserted
                # after the master has sampled STOP# (target termination).
                c.frame = not (k >= m_ready and (last_wanted or (stopping and k > t_ready)))
                c.req64 = wide and c.frame
                c.irdy = k >= m_ready
                c.devsel = k >= devsel_at
                c.ack64 = wide_xfer and c.devsel
                c.cbe = bes[i] if wide else (bes[i] & 0xF) | 0xF0
                if stopping and k >= t_ready:
                    c.stop = True
                    if term == "target_abort":
                        c.devsel = c.ack64 = False
                c.trdy = with_data and k >= t_ready and not (stopping and term == "target_abort")
                value = data[i] if wide_xfer else data[i] & mask
                if read:
                    c.ad = value if c.trdy else self._junk()
                else:
                    c.ad = value if c.irdy else self._junk()
                # Each side's waits count on their own; a clock where neither is ready counts twice.
                if not c.irdy:
                    exp.master_wait += 1
                if not c.trdy and not c.stop:
                    exp.target_wait += 1
            if with_data:
                exp.data.append(data[i] if wide_xfer else data[i] & mask)
                lanes = 8 if wide_xfer else 4
                exp.bytes += lanes - bin(bes[i] & ((1 << lanes) - 1)).count("1")
            final = done
            ps = done + 1
        if k_term is not None:
            exp.termination = ("retry" if term in ("retry", "disconnect_without_data") and not exp.data
                               else term)
            exp.stop = True
            if self.at(final).frame:
                # The master saw STOP# with FRAME# asserted: one more clock with FRAME#
                # deasserted and IRDY# asserted completes the transaction (spec 3.3.3.2).
                c = self.at(final + 1)
                c.irdy, c.stop = True, True
                c.devsel = term != "target_abort"
                c.ack64 = wide_xfer and c.devsel
                c.cbe = self.at(final).cbe
                c.ad = self._junk()
                final += 1
        exp.es_clock = final + 1
        del self.clocks[final + 1:]
        self.idle(gap)
        return exp

    def _master_abort(self, exp, last_addr, mwait, data, bes, wide, read, gap) -> Expect:
        # No DEVSEL# on clocks last_addr+1..+4; the master deasserts FRAME# on +5 and IRDY# on +6.
        exp.devsel, exp.termination = "none", "master_abort"
        m_ready = last_addr + 1 + mwait[0]
        final = last_addr + 5
        for k in range(last_addr + 1, final + 1):
            c = self.at(k)
            c.frame = k < final and not (len(data) == 1 and k >= m_ready)
            c.req64 = wide and c.frame
            c.irdy = k >= m_ready
            c.cbe = bes[0] | (0 if wide else 0xF0)
            c.ad = data[0] if (c.irdy and not read) else self._junk()
            if not c.irdy:
                exp.master_wait += 1
            exp.target_wait += 1  # no target ever answers
        exp.es_clock = final + 1
        del self.clocks[final + 1:]
        self.idle(gap)
        return exp

    # -- levels ------------------------------------------------------------------------------
    def levels(self, channels) -> np.ndarray:
        """(clocks, channels) electrical levels; PAR/PAR64 driven one clock after AD/C/BE#."""
        rows = []
        prev = None
        for c in self.clocks:
            par = par64 = 0
            if prev is not None:
                par = parity(prev.ad & 0xFFFFFFFF) ^ parity(prev.cbe & 0xF)
                par64 = parity(prev.ad >> 32) ^ parity(prev.cbe >> 4)
            par ^= c.par_flip
            par64 ^= c.par64_flip
            row = []
            for name in channels:
                if name.startswith("AD["):
                    row.append((c.ad >> int(name[3:-1])) & 1)
                elif name.startswith("C/BE#["):
                    row.append((c.cbe >> int(name[6:-1])) & 1)
                elif name == "PAR":
                    row.append(par)
                elif name == "PAR64":
                    row.append(par64)
                else:
                    attr = name.rstrip("#").lower()
                    row.append(0 if getattr(c, attr) else 1)
            rows.append(row)
            prev = c
        return np.array(rows, dtype=np.uint8)


def timing(levels: np.ndarray, spc: int = 4, edge: int = 2, tco=None, seed: int = 7) -> np.ndarray:
    """Per-clock levels -> ``spc`` samples per clock plus a leading CLK column.

    Clock k's rising CLK edge is sample ``spc*k + edge``; each signal changes ``tco`` samples
    after the previous edge (``tco`` per channel, default random 1..spc-1), as real agents do.
    """
    nclk, nch = levels.shape
    rng = np.random.default_rng(seed)
    if tco is None:
        tco = rng.integers(1, spc, size=nch)
    tco = np.broadcast_to(np.asarray(tco), (nch,))
    j = np.arange(nclk * spc)
    out = np.empty((len(j), nch + 1), dtype=np.uint8)
    out[:, 0] = (j % spc) >= edge
    for ch in range(nch):
        k = np.clip((j + spc - edge - tco[ch]) // spc, 0, nclk - 1)
        out[:, ch + 1] = levels[k, ch]
    return out


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
    cases = [
        (0x7, 0xFE000100, "csr"), (0x6, 0xFE01FFFC, "csr"), (0x6, 0xFE020000, "dma"),
        (0x7, 0x12345000, "dma"), (0xF, 0x00100000, "dma"), (0x7, 0xFEE00000, "msi"),
        (0x6, 0xFEE00000, "dma"), (0x2, 0xE804, "csr"), (0x3, 0x3F8, "unknown"),
        (0xA, 0x80000004, "config"), (0xB, 0x00010010, "config"), (0x0, 0x0, "unknown"),
    ]
    for code, addr, _ in cases:
        bus.txn(code, addr, [0])
    bus.idle(2)
    recs = decode(tmp_path, bus, bars="0xfe000000-0xfe01ffff;0xe800-0xe81f").records
    assert [r["kind"] for r in recs] == [k for _, _, k in cases]
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
