"""Per-clock PCI protocol rules (PCI Local Bus Specification 3.0), checked on the wires alone.

This checker knows nothing of the renderer: it takes unpacked per-clock electrical levels
(``{channel name: array of 0/1}``, one entry per rising CLK edge, 1 = high) and reports
``(clock, rule)`` pairs for every clock that breaks a rule. Transactions are found the way a bus
analyzer finds them: a *run* is a maximal stretch of clocks on which FRAME# or IRDY# is asserted.
AD/C/BE#/PAR rules apply when those channels are present; the 64-bit rules when REQ64# is.
A data-phase parity error that the receiver reports with PERR# is correct behaviour, not a
violation; :func:`parity_errors` lists them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

Violation = tuple[int, str]
#: Records the clocks of a mask as violations of one rule.
Flag = Callable[[np.ndarray, str], None]
_DAC = 0xD
_READS = (0x0, 0x2, 0x6, 0xA, 0xC, 0xE)
_NO_CLOCK = np.iinfo(np.int64).max


def _prev(x: np.ndarray, fill: object) -> np.ndarray:
    """``x`` delayed by one clock; ``fill`` stands for clock -1."""
    out = np.empty_like(x)
    if x.size:
        out[0] = fill
        out[1:] = x[:-1]
    return out


def _changed(x: np.ndarray) -> np.ndarray:
    """Clocks whose value differs from the previous clock's (clock 0 has nothing to differ from)."""
    return np.concatenate([[False], x[1:] != x[:-1]])


def _vector(sig: Mapping[str, np.ndarray], name: str, bits: range) -> np.ndarray | None:
    """``name[bits]`` as one uint64 per clock (bit 0 of the range at bit 0), or None if absent."""
    if f"{name}[{bits.start}]" not in sig:
        return None
    value = np.zeros(len(sig["FRAME#"]), np.uint64)
    for out_bit, bit in enumerate(bits):
        value |= np.asarray(sig[f"{name}[{bit}]"], np.uint64) << np.uint64(out_bit)
    return value


def _odd(*values: np.ndarray) -> np.ndarray:
    return sum(np.bitwise_count(v).astype(np.int64) for v in values) % 2 == 1


class _Bus:
    """Asserted-ness of each control signal, runs (transactions) and their address phases."""

    def __init__(self, sig: Mapping[str, np.ndarray]):
        def asserted(name: str) -> np.ndarray:
            return np.asarray(sig[name]) == 0

        self.n = len(sig["FRAME#"])
        self.frame, self.irdy = asserted("FRAME#"), asserted("IRDY#")
        self.trdy, self.devsel, self.stop = asserted("TRDY#"), asserted("DEVSEL#"), asserted("STOP#")
        self.perr = asserted("PERR#")
        self.wide_bus = "REQ64#" in sig
        self.req64 = asserted("REQ64#") if self.wide_bus else np.zeros(self.n, bool)
        self.ack64 = asserted("ACK64#") if self.wide_bus else np.zeros(self.n, bool)
        self.busy = self.frame | self.irdy
        # A data phase completes on IRDY# with TRDY# or STOP# (spec 3.3.3.2.1, rule 1).
        self.complete = self.irdy & (self.trdy | self.stop)
        starts = self.busy & ~_prev(self.busy, False)
        self.rs = np.flatnonzero(starts)
        self.re = np.append(np.flatnonzero(~self.busy & _prev(self.busy, False)), self.n)[: self.rs.size]
        # Run of each clock; an idle clock belongs to the run that just ended (its last transitions).
        self.rid = np.maximum(np.cumsum(starts) - 1, 0)
        width = 64 if self.wide_bus else 32
        self.ad_lo = _vector(sig, "AD", range(0, 32))
        self.ad_hi = _vector(sig, "AD", range(32, 64)) if width == 64 else None
        self.cbe_lo = _vector(sig, "C/BE#", range(0, 4))
        self.cbe_hi = _vector(sig, "C/BE#", range(4, 8)) if width == 64 else None
        self.par = np.asarray(sig["PAR"]).astype(bool) if "PAR" in sig else None
        self.par64 = np.asarray(sig["PAR64"]).astype(bool) if "PAR64" in sig else None
        if self.cbe_lo is not None and self.rs.size:
            first_cmd = self.cbe_lo[self.rs]
            self.dac_known = True
            self.dac = first_cmd == _DAC
            self.cmd = np.where(self.dac, self.cbe_lo[np.minimum(self.rs + 1, self.n - 1)], first_cmd)
        else:
            self.dac_known = False
            self.dac = np.zeros(self.rs.size, bool)
            self.cmd = np.full(self.rs.size, -1)
        self.a = np.minimum(self.rs + self.dac, self.n - 1)  # last address phase of each run
        self.address = np.zeros(self.n, bool)
        self.address[self.rs] = True
        self.address[self.a] = True
        self.data = self.busy & ~self.address
        self._devsel_timing()

    def _devsel_timing(self) -> None:
        """First DEVSEL# per run; a run with none 1..4 clocks after its address phase is a master abort."""
        clocks = np.append(np.flatnonzero(self.devsel), _NO_CLOCK)
        first = clocks[np.searchsorted(clocks, self.a + 1)]
        # Without C/BE# a dual address cycle cannot be seen: allow its extra clock.
        window = 4 + (0 if self.dac_known else 1)
        self.first_devsel = np.where(first < self.re, first, _NO_CLOCK)
        self.claimed = self.first_devsel <= self.a + window
        self.master_abort = ~self.claimed

    def per_clock(self, run_values: np.ndarray) -> np.ndarray:
        """Broadcast a per-run array to clocks (idle clocks get the run before them)."""
        if run_values.size == 0:
            return np.zeros(self.n, run_values.dtype)
        return run_values[self.rid]


def check(sig: Mapping[str, np.ndarray]) -> list[Violation]:
    """Every ``(clock, rule)`` that breaks a PCI 3.0 protocol rule, sorted by clock."""
    bus = _Bus(sig)
    found: list[Violation] = []

    def flag(mask: np.ndarray, rule: str) -> None:
        found.extend((int(c), rule) for c in np.flatnonzero(mask))

    _framing(bus, flag)
    _target(bus, flag)
    _latency(bus, flag)
    _wide(bus, flag)
    if bus.ad_lo is not None:
        _datapath(bus, flag)
    return sorted(found)


def _framing(bus: _Bus, flag: Flag) -> None:
    """FRAME#/IRDY# (spec 3.3.1, 3.3.3.1) and the idle clock between transactions."""
    frame, irdy, busy = bus.frame, bus.irdy, bus.busy
    pf, pi, pc = _prev(frame, False), _prev(irdy, False), _prev(bus.complete, False)
    clocks = np.arange(bus.n)
    run_start = busy & ~_prev(busy, False)
    flag(run_start & ~frame, "IRDY# asserted outside a transaction (no FRAME# address phase)")
    flag(frame & ~pf & _prev(busy, False), "FRAME# asserted again without an idle clock")
    flag(irdy & bus.address, "IRDY# asserted in an address phase")
    flag(pf & ~frame & ~irdy, "FRAME# deasserted without IRDY# asserted")
    # Master abort: after the subtractive-decode clock the master may end without completion.
    aborting = bus.per_clock(bus.master_abort) & (clocks >= bus.per_clock(bus.a) + 5)
    waiting = pi & ~pc & ~aborting
    flag(waiting & ~irdy, "IRDY# deasserted before its data phase completed")
    flag(waiting & (frame != pf), "FRAME# changed while IRDY# waited for the data phase to complete")
    # Rule 5: once STOP# is seen, FRAME# goes as soon as IRDY# can be asserted.
    flag(_prev(bus.stop, False) & irdy & frame, "FRAME# still asserted with IRDY# after STOP#")


def _target(bus: _Bus, flag: Flag) -> None:
    """DEVSEL#, TRDY#, STOP# (spec 3.3.3.2, 3.6.1)."""
    devsel, trdy, stop = bus.devsel, bus.trdy, bus.stop
    pd, pt, ps, pc = _prev(devsel, False), _prev(trdy, False), _prev(stop, False), _prev(bus.complete, False)
    aborted = stop & ~devsel
    flag(trdy & ~devsel, "TRDY# asserted without DEVSEL#")
    flag(aborted & ~pd & ~_prev(aborted, False), "STOP# without DEVSEL# (target abort) but no DEVSEL# before")
    flag(~bus.busy & (trdy | stop | devsel), "TRDY#/STOP#/DEVSEL# asserted on an idle bus")
    flag(devsel & bus.address, "DEVSEL# asserted in an address phase")
    first = bus.first_devsel[~bus.claimed & (bus.first_devsel != _NO_CLOCK)]
    flag(np.isin(np.arange(bus.n), first), "DEVSEL# asserted later than subtractive decode (master abort)")
    responded = (pt | ps) & ~pc
    changed = (trdy != pt) | (stop != ps) | (devsel != pd)
    flag(responded & changed, "DEVSEL#/TRDY#/STOP# changed before the data phase completed")
    final_done = pc & ~_prev(bus.frame, False)
    flag(pd & ~devsel & ~final_done & ~stop, "DEVSEL# deasserted before the final data phase completed")
    flag(ps & ~stop & _prev(bus.frame, False), "STOP# deasserted while FRAME# is still asserted")
    if bus.cbe_lo is not None and bus.rs.size:
        reads = np.isin(bus.cmd, _READS)
        turnaround = np.zeros(bus.n, bool)
        turnaround[np.minimum(bus.a[reads] + 1, bus.n - 1)] = True
        flag(turnaround & trdy, "TRDY# on the AD turnaround clock of a read")


def _phase_begin(bus: _Bus) -> np.ndarray:
    """Per clock, the first clock of the data phase it belongs to (spec 3.3: after an address
    phase or a completed data phase)."""
    after_address = _prev(bus.address, False)
    begins = bus.data & (after_address | _prev(bus.complete, False))
    return np.maximum.accumulate(np.where(begins, np.arange(bus.n), 0)) if bus.n else begins.astype(int)


def _latency(bus: _Bus, flag: Flag) -> None:
    """Target initial (16) and subsequent (8) latency, master data latency (8): spec 3.5.1, 3.5.2."""
    clocks = np.arange(bus.n)
    begin = _phase_begin(bus)
    rs = bus.per_clock(bus.rs)
    first = begin == bus.per_clock(bus.a) + 1
    master_late = np.where(first, clocks - rs >= 8, clocks - begin >= 7)
    flag(bus.data & ~bus.irdy & master_late, "IRDY# later than 8 clocks into the data phase")
    target_late = np.where(first, clocks - rs >= 16, clocks - begin >= 7)
    claimed = bus.per_clock(bus.claimed)
    flag(bus.data & claimed & ~(bus.trdy | bus.stop) & target_late, "target latency exceeded (16 initial / 8 later)")


def _wide(bus: _Bus, flag: Flag) -> None:
    """REQ64# has FRAME#'s timing, ACK64# has DEVSEL#'s (spec 3.8)."""
    if not bus.wide_bus:
        return
    req64, ack64 = bus.req64, bus.ack64
    flag(req64 & ~bus.frame, "REQ64# asserted without FRAME#")
    flag((req64 != _prev(req64, False)) & (bus.frame == _prev(bus.frame, False)), "REQ64# changed without FRAME#")
    flag(ack64 & ~bus.devsel, "ACK64# asserted without DEVSEL#")
    flag((ack64 != _prev(ack64, False)) & (bus.devsel == _prev(bus.devsel, False)), "ACK64# changed without DEVSEL#")
    asked = bus.per_clock(req64[bus.rs] if bus.rs.size else np.zeros(0, bool))
    flag(ack64 & ~asked, "ACK64# without REQ64# in the address phase")


def _bad_parity(bus: _Bus) -> tuple[np.ndarray, np.ndarray]:
    """Clocks c whose address/data the PAR (PAR64) at c+1 does not cover with even parity."""
    nxt_par = np.append(bus.par[1:], bus.par[-1:]) if bus.n else bus.par
    bad = _odd(bus.ad_lo, bus.cbe_lo) != nxt_par
    bad64 = np.zeros(bus.n, bool)
    if bus.par64 is not None:
        nxt64 = np.append(bus.par64[1:], bus.par64[-1:])
        bad64 = _odd(bus.ad_hi, bus.cbe_hi) != nxt64
    bad[-1:] = bad64[-1:] = False  # the clock after the capture is unknown
    return bad, bad64


def _transfers(bus: _Bus) -> tuple[np.ndarray, np.ndarray]:
    """Data transfer clocks (IRDY# & TRDY#, spec 3.3.1) and which of them moved 64 bits."""
    moved = bus.irdy & bus.trdy
    return moved, moved & bus.ack64


def parity_errors(sig: Mapping[str, np.ndarray]) -> np.ndarray:
    """Clocks of data transfers whose PAR or PAR64 (one clock later) was wrong."""
    bus = _Bus(sig)
    bad, bad64 = _bad_parity(bus)
    moved, moved64 = _transfers(bus)
    return np.flatnonzero(moved & bad | moved64 & bad64)


def _datapath(bus: _Bus, flag: Flag) -> None:
    """PAR/PAR64 and PERR# (spec 3.7.4, 3.8.1), stable C/BE# and data within a data phase (3.3.1)."""
    bad, bad64 = _bad_parity(bus)
    moved, moved64 = _transfers(bus)
    reported = np.append(bus.perr[2:], np.zeros(min(2, bus.n), bool))  # PERR# two clocks later
    wide_dac = bus.dac & (bus.req64[bus.rs] if bus.rs.size else np.zeros(0, bool))
    address64 = np.zeros(bus.n, bool)
    address64[bus.rs[wide_dac]] = address64[bus.a[wide_dac]] = True
    flag(bus.address & bad | address64 & bad64, "PAR/PAR64 wrong after an address phase")
    data_error = moved & bad | moved64 & bad64
    flag(data_error & ~reported, "data parity wrong and no PERR# two clocks later")
    detected = np.concatenate([np.zeros(min(2, bus.n), bool), data_error[:-2]])
    flag(bus.perr & ~detected, "PERR# without a data parity error two clocks before")
    same_phase = bus.data & _prev(bus.data, False) & ~_prev(bus.complete, False)
    wide_run = bus.per_clock(bus.req64[bus.rs] if bus.rs.size else np.zeros(0, bool))
    cbe = bus.cbe_lo
    if bus.cbe_hi is not None:
        cbe = np.where(wide_run, cbe | bus.cbe_hi << np.uint64(4), cbe)
    flag(same_phase & _changed(cbe), "C/BE# changed within a data phase")
    ad = bus.ad_lo
    if bus.ad_hi is not None:
        ad = np.where(bus.ack64 | wide_run, ad | bus.ad_hi << np.uint64(32), ad)
    reads = bus.per_clock(np.isin(bus.cmd, _READS))
    # Data is valid, so must hold, from IRDY# (writes) or TRDY# (reads) until completion.
    holding = np.where(reads, _prev(bus.trdy, False), _prev(bus.irdy, False))
    flag(same_phase & holding & _changed(ad), "AD changed while its data was valid and pending")
