"""A small PCI bus model for tests: transactions drawn clock by clock as the PCI Local Bus Specification 3.0,
chapter 3, draws them (address phase, turnaround, DEVSEL# decode speeds, IRDY#/TRDY# handshakes, target and
master terminations), turned into electrical levels one row per clock (state mode) or several samples per
clock with a CLK column (timing mode, :func:`timing`).

The PCI decoder's tests (``test_decoder_pci.py``) check the decoder against the model's own bookkeeping
(:class:`Expect`); the PCI kernel's tests (``test_kernel_pci.py``) draw bus activity from it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import numpy as np

READ_CMDS = {0x0, 0x2, 0x6, 0xA, 0xC, 0xE}
CMD_NAMES = [
    "Interrupt Acknowledge", "Special Cycle", "I/O Read", "I/O Write", "Reserved", "Reserved",
    "Memory Read", "Memory Write", "Reserved", "Reserved", "Configuration Read",
    "Configuration Write", "Memory Read Multiple", "Dual Address Cycle", "Memory Read Line",
    "Memory Write and Invalidate",
]

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
