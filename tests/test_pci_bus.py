"""PCI bus renderer: exact clocks against the spec's timing rules, and an independent rule check.

Clock numbers below follow the module doc of ``nicrig.acquisition.sim.pci_bus``: the address
phase is the first clock FRAME# is sampled asserted, and a signal's value at a clock is what the
agents sample at that rising edge. ``pcirules`` (this folder) checks the protocol from the wires.
"""

from __future__ import annotations

import numpy as np
import pcirules
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nicrig.acquisition.capture import SourceSpec, unpack_bits
from nicrig.acquisition.sim.pci_bus import (
    COMMAND_NAMES,
    READ_COMMANDS,
    ROLES,
    TERMINATIONS,
    TRUTH_DTYPE,
    TURNAROUND_CLOCKS,
    UNCLAIMED_COMMANDS,
    PciRenderer,
    PciTransaction,
    busy_clocks,
    channels_for,
    roles_for,
)

ADDR = 0x0004_1000


def tx(start: int = 10, command: int = 0x7, n: int = 1, **kw) -> PciTransaction:
    """A transaction with distinct data words and all byte lanes of its width enabled."""
    wide = kw.get("wide", False)
    kw.setdefault("data", np.array([0x1111_0000_A5A5_0000 + 0x0101_0101 * (k + 1) for k in range(n)], np.uint64))
    kw.setdefault("byte_enables", np.full(n, 0xFF if wide else 0xF, np.uint8))
    kw.setdefault("address", ADDR)
    return PciTransaction(start_clk=start, command=command, **kw)


def render(txs, clocks: int = 40, width: int = 32, with_ad: bool = True, **kw) -> tuple[dict, PciRenderer]:
    """Electrical levels per channel for clocks [0, clocks), and the renderer."""
    r = PciRenderer(txs, width_bits=width, with_ad=with_ad, **kw)
    channels = r.channels()
    bits = unpack_bits(r.render(0, clocks), len(channels))
    return {name: bits[:, i] for i, name in enumerate(channels)}, r


def low(sig: dict, name: str) -> list[int]:
    """Clocks on which an active-low signal is asserted."""
    return np.flatnonzero(sig[name] == 0).tolist()


def span(first: int, last: int) -> list[int]:
    return list(range(first, last + 1))


def vec(sig: dict, name: str, width: int) -> np.ndarray:
    return sum(sig[f"{name}[{i}]"].astype(np.uint64) << np.uint64(i) for i in range(width))


def clean(sig: dict) -> None:
    assert pcirules.check(sig) == []


# -- channel sets -------------------------------------------------------------------------------


def test_channels_order_and_roles():
    assert channels_for(32, False, False) == [
        "FRAME#", "IRDY#", "TRDY#", "DEVSEL#", "STOP#", "REQ#", "GNT#", "INTA#", "PERR#",
    ]  # fmt: skip
    full = channels_for(64, True, True)
    assert full[:12] == ["CLK"] + channels_for(64, False, False)
    assert full[10:12] == ["REQ64#", "ACK64#"]
    assert full[12] == "AD[0]" and full[75] == "AD[63]"
    assert full[76:84] == [f"C/BE#[{i}]" for i in range(8)]
    assert full[84:] == ["PAR", "PAR64"]
    assert len(channels_for(32, True, False)) == 9 + 32 + 4 + 1
    assert set(ROLES) >= {"clk", "frame", "ad", "cbe", "par64"}
    for width in (32, 64):
        for with_ad in (False, True):
            for timing in (False, True):
                roles = roles_for(width, with_ad, timing)
                spec = SourceSpec(
                    "pci", channels_for(width, with_ad, timing), mode="timing", samplerate_hz=1e9, roles=roles
                )
                spec.validate()
                assert ("ad" in roles) == with_ad and ("clk" in roles) == timing
    with pytest.raises(ValueError):
        channels_for(16, False, False)


# -- the spec's basic timing diagrams (3.3.1, figures 3-5 and 3-6) ------------------------------


def test_basic_read_with_waits():
    # Fast DEVSEL# read of 3 dwords, target wait in phase 1, master wait in phase 2 (fig. 3-5).
    t = tx(2, 0x6, 3, target_waits=np.array([0, 1, 0]), master_waits=np.array([0, 0, 1]),
           byte_enables=np.array([0xF, 0x3, 0xC], np.uint8))  # fmt: skip
    sig, r = render([t], 14)
    clean(sig)
    assert low(sig, "FRAME#") == span(2, 7)  # deasserted when IRDY# goes low for the last phase
    assert low(sig, "IRDY#") == [3, 4, 5, 6, 8]
    assert low(sig, "DEVSEL#") == span(3, 8)  # fast: one clock after the address phase
    assert low(sig, "TRDY#") == [4, 6, 7, 8]  # not on clock 3: AD turnaround of a read
    ad, cbe = vec(sig, "AD", 32), vec(sig, "C/BE#", 4)
    d = t.data & np.uint64(0xFFFFFFFF)
    assert ad[2] == ADDR and cbe[2] == 0x6
    assert ad[3] == ADDR and cbe[3] == 0x0  # turnaround: AD undriven (held), byte enables driven
    assert ad[4] == d[0] and (ad[5], ad[6]) == (d[1], d[1]) and (ad[7], ad[8]) == (d[2], d[2])
    assert (cbe[5], cbe[6], cbe[7], cbe[8]) == (0xC, 0xC, 0x3, 0x3)
    assert busy_clocks(t, 32) == 7
    row = r.truth()[0]
    assert (row["ss"], row["es"], row["data_phases"], row["bytes"]) == (2, 9, 3, 4 + 2 + 2)
    # data clocks 3..8: no TRDY# on 3 and 5, no IRDY# on 7
    assert (row["target_wait_clocks"], row["master_wait_clocks"]) == (2, 1)


def test_basic_write_with_waits():
    # Fast DEVSEL# write: data moves with DEVSEL# on the first clock after the address (fig. 3-6).
    t = tx(2, 0x7, 3, target_waits=np.array([0, 0, 1]), master_waits=np.array([0, 1, 0]))
    sig, _ = render([t], 12)
    clean(sig)
    assert low(sig, "FRAME#") == span(2, 5)
    assert low(sig, "IRDY#") == [3, 5, 6, 7]
    assert low(sig, "TRDY#") == [3, 4, 5, 7]
    assert low(sig, "DEVSEL#") == span(3, 7)
    ad = vec(sig, "AD", 32)
    d = t.data & np.uint64(0xFFFFFFFF)
    assert ad[3] == d[0] and ad[4] == ad[5] == d[1] and ad[6] == ad[7] == d[2]
    assert busy_clocks(t, 32) == 6


@pytest.mark.parametrize("devsel", [1, 2, 3, 4])
@pytest.mark.parametrize("command", [0x6, 0x7])
def test_devsel_timing(devsel, command):
    sig, _ = render([tx(5, command, 1, devsel=devsel)], 16)
    clean(sig)
    assert low(sig, "DEVSEL#")[0] == 5 + devsel
    first_data = max(5 + devsel, 5 + 2 if command in READ_COMMANDS else 5 + 1)
    assert low(sig, "TRDY#") == [first_data]


# -- terminations: exact clocks (module doc) ----------------------------------------------------

# (name, transaction, FRAME#, IRDY#, TRDY#, STOP#, DEVSEL#) with the address phase at clock 10.
TERMINATION_CASES = [
    ("normal single read", tx(10, 0x6, 1), [10], [11, 12], [12], [], [11, 12]),
    ("retry single", tx(10, 0x7, 1, termination="retry"), [10], [11], [], [11], [11]),
    ("retry burst", tx(10, 0x7, 3, termination="retry", devsel=2, target_waits=np.array([1, 0, 0])),
     span(10, 13), span(11, 14), [], [13, 14], span(12, 14)),
    ("retry burst, master late", tx(10, 0x7, 2, termination="retry", master_waits=np.array([2, 0])),
     span(10, 12), [13], [], span(11, 13), span(11, 13)),
    ("disconnect with data", tx(10, 0x6, 2, termination="disconnect_with_data"),
     span(10, 13), span(11, 14), [12, 13], [13, 14], span(11, 14)),
    ("disconnect with data, master late", tx(10, 0x7, 2, termination="disconnect_with_data",
                                             master_waits=np.array([0, 2])),
     span(10, 13), [11, 14], span(11, 14), span(12, 14), span(11, 14)),
    ("disconnect without data", tx(10, 0x7, 2, termination="disconnect_without_data"),
     span(10, 13), span(11, 14), [11, 12], [13, 14], span(11, 14)),
    ("target abort, no data", tx(10, 0x7, 0, termination="target_abort", devsel=2),
     span(10, 13), span(11, 14), [], [13, 14], [12]),
    ("target abort after data", tx(10, 0x6, 2, termination="target_abort"),
     span(10, 14), span(11, 15), [12, 13], [14, 15], span(11, 13)),
    ("master abort single", tx(10, 0x7, 1, termination="master_abort", devsel=0), [10], span(11, 14), [], [], []),
    ("master abort burst", tx(10, 0x6, 3, termination="master_abort", devsel=0),
     span(10, 14), span(11, 15), [], [], []),
    ("master abort DAC", tx(10, 0x7, 1, termination="master_abort", devsel=0, address=0x1_0000_0000),
     [10, 11], span(12, 15), [], [], []),
]  # fmt: skip


@pytest.mark.parametrize("case", TERMINATION_CASES, ids=[c[0] for c in TERMINATION_CASES])
def test_termination_clocks(case):
    _, t, frame, irdy, trdy, stop, devsel = case
    sig, r = render([t], 24)
    clean(sig)
    assert low(sig, "FRAME#") == frame
    assert low(sig, "IRDY#") == irdy
    assert low(sig, "TRDY#") == trdy
    assert low(sig, "STOP#") == stop
    assert low(sig, "DEVSEL#") == devsel
    assert busy_clocks(t, 32) == irdy[-1] - 10 + 1
    row = r.truth()[0]
    assert row["es"] == irdy[-1] + 1
    moved = sum(1 for c in trdy if c in irdy)
    assert row["data_phases"] == moved == (0 if t.termination in ("retry", "master_abort") else len(t.data))
    assert row["stop_asserted"] == bool(stop)
    assert row["termination"].decode() == t.termination


def test_master_abort_gives_up_after_the_fifth_clock():
    # Spec 3.3.3.1: with no DEVSEL# by the subtractive clock, the bus is idle five clocks after FRAME#.
    sig, _ = render([tx(10, 0x1, 1, termination="master_abort", devsel=0)], 20)  # Special Cycle
    assert low(sig, "IRDY#")[-1] == 14 and sig["IRDY#"][15] == 1
    assert low(sig, "DEVSEL#") == []


# -- commands, DAC, 64-bit ----------------------------------------------------------------------


@pytest.mark.parametrize("command", [c for c in range(16) if c != 0xD])
def test_every_command(command):
    unclaimed = command in UNCLAIMED_COMMANDS
    address = 0x0000_0CF8 if command in (0xA, 0xB) else ADDR
    t = tx(4, command, 1, address=address, devsel=0 if unclaimed else 2,
           termination="master_abort" if unclaimed else "normal", kind="csr")  # fmt: skip
    sig, r = render([t], 16)
    clean(sig)
    assert vec(sig, "C/BE#", 4)[4] == command
    row = r.truth()[0]
    assert row["command"] == command and row["command_name"].decode() == COMMAND_NAMES[command]
    assert row["kind"] == b"csr" and row["data_phases"] == (0 if unclaimed else 1)


def test_memory_address_bits_are_linear_burst_order():
    # AD[1:0] = 00 for memory commands (spec 3.2.2.2); I/O addresses are byte-exact.
    sig, _ = render([tx(4, 0x7, 1, address=0x1002, byte_enables=np.array([0xC], np.uint8)),
                     tx(12, 0x3, 1, address=0x3F9, byte_enables=np.array([0x2], np.uint8))], 20)  # fmt: skip
    ad = vec(sig, "AD", 32)
    assert ad[4] == 0x1000 and ad[12] == 0x3F9


def test_dual_address_cycle():
    t = tx(4, 0x6, 2, address=0x0000_0012_3456_7000, devsel=1)
    sig, r = render([t], 16)
    clean(sig)
    ad, cbe = vec(sig, "AD", 32), vec(sig, "C/BE#", 4)
    assert (ad[4], cbe[4]) == (0x3456_7000, 0xD)  # low address with the DAC command
    assert (ad[5], cbe[5]) == (0x12, 0x6)  # high address with the real command
    assert low(sig, "FRAME#")[:2] == [4, 5]
    assert low(sig, "DEVSEL#")[0] == 6  # decode timed from the second address phase
    assert low(sig, "TRDY#")[0] == 7  # turnaround on 6
    row = r.truth()[0]
    assert row["dac"] and row["address"] == 0x12_3456_7000 and row["command"] == 0x6


def test_64bit_transfer():
    t = tx(4, 0xC, 2, wide=True, address=0x0000_0010_0000_2000, byte_enables=np.array([0xFF, 0x0F], np.uint8))
    sig, r = render([t], 16, width=64)
    clean(sig)
    assert low(sig, "REQ64#") == low(sig, "FRAME#") == span(4, 7)
    assert low(sig, "ACK64#") == low(sig, "DEVSEL#") == span(6, 8)
    ad, cbe = vec(sig, "AD", 64), vec(sig, "C/BE#", 8)
    assert ad[4] & np.uint64(0xFFFFFFFF) == 0x2000 and ad[4] >> np.uint64(32) == 0x10  # DAC, REQ64#: both halves
    assert cbe[4] == 0xCD and cbe[5] == 0xCC  # C/BE[7:4]# carries the command
    moved = low(sig, "TRDY#")
    assert [int(ad[c]) for c in moved] == [int(x) for x in t.data]
    assert [int(cbe[c]) for c in moved] == [0x00, 0xF0]
    assert r.truth()[0]["bytes"] == 12


def test_32bit_transaction_on_64bit_bus_keeps_upper_half():
    wide = tx(4, 0x7, 1, wide=True, data=np.array([0xAAAA_BBBB_0000_0001], np.uint64))
    narrow = tx(10, 0x7, 2)
    sig, _ = render([wide, narrow], 20, width=64)
    clean(sig)
    ad = vec(sig, "AD", 64)
    assert low(sig, "REQ64#") == [4] and low(sig, "ACK64#") == [5]
    assert all(ad[c] >> np.uint64(32) == 0xAAAA_BBBB for c in range(5, 20))  # parked, never driven again


def test_parity_is_even_one_clock_later():
    sig, _ = render([tx(3, 0x6, 2), tx(10, 0x7, 2, devsel=3)], 20)
    ad, cbe = vec(sig, "AD", 32), vec(sig, "C/BE#", 4)
    ones = np.bitwise_count(ad) + np.bitwise_count(cbe)
    assert np.all((ones[:-1] + sig["PAR"][1:]) % 2 == 0)


@pytest.mark.parametrize("command", [0x6, 0x7])
def test_parity_error_reported_with_perr(command):
    t = tx(10, command, 3, wide=True, parity_error_phases=(1,))
    sig, r = render([t], 24, width=64)
    moved = low(sig, "TRDY#")
    bad = moved[1]
    assert pcirules.check(sig) == []
    assert pcirules.parity_errors(sig).tolist() == [bad]
    assert low(sig, "PERR#") == [bad + 2]
    ad, cbe = vec(sig, "AD", 64), vec(sig, "C/BE#", 8)
    odd_lo = (np.bitwise_count(ad[bad] & np.uint64(0xFFFFFFFF)) + np.bitwise_count(cbe[bad] & np.uint64(0xF))) % 2
    assert sig["PAR"][bad + 1] != odd_lo  # driven wrong
    assert r.truth()[0]["parity_error"]


# -- sequences ------------------------------------------------------------------------------------


def test_back_to_back_with_one_idle_clock():
    first = tx(3, 0x6, 2, master="nic")
    second_start = 3 + busy_clocks(first, 32) + TURNAROUND_CLOCKS
    second = tx(second_start, 0x7, 1)
    sig, r = render([second, first], 20)  # any order in, rows by start out
    clean(sig)
    idle = second_start - 1
    assert sig["FRAME#"][idle] == sig["IRDY#"][idle] == 1
    assert sig["IRDY#"][idle - 1] == 0 and sig["FRAME#"][second_start] == 0
    assert r.truth()["ss"].tolist() == [3, second_start]
    view = r.truth_view()  # the same rows, uncopied and unchangeable; truth() a copy to change
    assert np.array_equal(view, r.truth()) and not view.flags.writeable
    with pytest.raises(ValueError, match="read-only"):
        view["ss"][0] = 0
    copy = r.truth()
    copy["ss"][0] = 0
    assert r.truth_view()["ss"][0] == 3
    with pytest.raises(ValueError, match="before the bus is idle"):
        PciRenderer([first, tx(second_start - 1, 0x7, 1)], width_bits=32, with_ad=False)


def test_interrupts_and_arbitration():
    nic = tx(10, 0x7, 2, master="nic")
    host = tx(20, 0x6, 1)
    sig, _ = render([nic, host], 30, with_ad=False, interrupts=[(3, 6), (5, 9), (25, 26)])
    clean(sig)
    assert low(sig, "INTA#") == span(3, 8) + [25]
    assert low(sig, "REQ#") == [7, 8, 9]
    assert low(sig, "GNT#") == [8, 9, 10]  # sampled asserted on the idle clock 9
    assert sig["FRAME#"][9] == sig["IRDY#"][9] == 1


def test_req_backs_off_after_retry():
    retried = tx(10, 0x7, 1, master="nic", termination="retry")
    last = 10 + busy_clocks(retried, 32) - 1
    again = tx(last + 2, 0x7, 1, master="nic")
    later = tx(30, 0x7, 1, master="nic")
    sig, _ = render([retried, again, later], 40, with_ad=False)
    clean(sig)
    assert sig["REQ#"][last] == sig["REQ#"][last + 1] == 1  # the idle clock and the one before (3.4.1)
    assert sig["GNT#"][last + 1] == 0  # the arbiter still grants the parked bus
    assert low(sig, "REQ#")[-3:] == [27, 28, 29]


# -- rendering in blocks and in timing mode --------------------------------------------------------


def mixed(width: int = 64) -> list[PciTransaction]:
    txs, clk = [], 2
    for i, term in enumerate(TERMINATIONS * 2):
        n = 0 if term == "target_abort" and i % 2 else 3
        t = tx(clk, 0x6 if i % 3 else 0x7, n, termination=term, devsel=0 if term == "master_abort" else 1 + i % 4,
               wide=width == 64 and i % 2 == 0, master="nic" if i % 2 else "host",
               address=ADDR if i % 4 else 0x2_0000_0000, target_waits=np.arange(n) % 3,
               parity_error_phases=(0,) if n and term in ("normal", "disconnect_with_data") else ())  # fmt: skip
        txs.append(t)
        clk += busy_clocks(t, width) + TURNAROUND_CLOCKS + i % 3
    return txs


@pytest.mark.parametrize("width", [32, 64])
@pytest.mark.parametrize("with_ad", [False, True])
def test_blocks_concatenate(width, with_ad):
    r = PciRenderer(mixed(width), width_bits=width, with_ad=with_ad, interrupts=[(5, 50)])
    whole = r.render(0, 250)
    cuts = [0, 1, 7, 8, 33, 100, 101, 177, 250]
    assert np.array_equal(whole, np.concatenate([r.render(a, b) for a, b in zip(cuts, cuts[1:])]))
    assert r.render(9, 9).shape == (0, whole.shape[1])
    k = 3
    timed = r.render(0, 250, samples_per_clock=k)
    assert np.array_equal(timed, np.concatenate([r.render(a, b, samples_per_clock=k) for a, b in zip(cuts, cuts[1:])]))


@pytest.mark.parametrize("k", [2, 3, 4])
def test_timing_mode_matches_state_mode(k):
    r = PciRenderer(mixed(), width_bits=64, with_ad=True)
    c0, c1 = 5, 180
    nch = len(r.channels())
    state = unpack_bits(r.render(c0, c1 + 1), nch)
    timed = unpack_bits(r.render(c0, c1, samples_per_clock=k), nch + 1)
    assert r.channels(timing=True) == ["CLK"] + r.channels()
    samples = np.arange(c0 * k, c1 * k)
    clock = -(-samples // k)  # sample s shows the state sampled at edge ceil(s / k)
    assert np.array_equal(timed[:, 1:], state[clock - c0])
    assert np.array_equal(timed[:, 0], (samples % k < k // 2).astype(np.uint8))
    edges = np.flatnonzero(np.diff(timed[:, 0].astype(int)) == 1) + 1 + c0 * k
    assert np.all(edges % k == 0)  # rising CLK edge of clock c at sample c*k
    with pytest.raises(ValueError):
        r.render(0, 4, samples_per_clock=1)


# -- truth ----------------------------------------------------------------------------------------


def test_truth_table():
    txs = mixed(64)
    r = PciRenderer(txs, width_bits=64, with_ad=False)
    truth = r.truth()
    assert truth.dtype == TRUTH_DTYPE and len(truth) == len(txs)
    for row, t in zip(truth, sorted(txs, key=lambda t: t.start_clk)):
        assert row["es"] - row["ss"] == busy_clocks(t, 64)
        done = 0 if t.termination in ("retry", "master_abort") else len(t.data)
        assert row["data_phases"] == done
        assert row["bytes"] == sum(bin(int(b)).count("1") for b in t.byte_enables[:done])
        assert row["master"].decode() == t.master and row["wide"] == t.wide
        assert row["parity_error"] == bool(t.parity_error_phases)


# -- validation -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"termination": "master_abort"}, "master_abort"),
        ({"devsel": 0}, "master_abort"),
        ({"termination": "bogus"}, "termination"),
        ({"wide": True}, "32-bit bus"),
        ({"data": np.zeros(0, np.uint64), "byte_enables": np.zeros(0, np.uint8)}, "empty data"),
        ({"command": 0xD}, "prefix"),
        ({"command": 0x1}, "claim"),
        ({"byte_enables": np.array([0x1F], np.uint8)}, "lanes"),
        ({"command": 0xF, "byte_enables": np.array([0x7], np.uint8)}, "Invalidate"),
        ({"target_waits": np.array([1, 2])}, "length"),
        ({"target_waits": np.array([-1])}, "negative"),
        ({"target_waits": np.array([16])}, "initial latency"),
        ({"master_waits": np.array([9])}, "IRDY#"),
        ({"parity_error_phases": (1,)}, "parity"),
        ({"master": "cpu"}, "master"),
        ({"command": 0x2, "address": 1 << 33}, "DAC"),
    ],
)
def test_inconsistent_input_raises(changes, message):
    fields = {"start_clk": 4, "command": 0x7, "address": ADDR, "data": np.array([1], np.uint64),
              "byte_enables": np.array([0xF], np.uint8)} | changes  # fmt: skip
    with pytest.raises(ValueError, match=message):
        PciRenderer([PciTransaction(**fields)], width_bits=32, with_ad=True)


@pytest.mark.parametrize(("waits", "message"), [(np.array([-1]), "at clock 20: master_waits must not be negative"),
                                               (np.array([0, 0]), "at clock 20: master_waits length differs")])
def test_phase_arrays_are_checked_when_some_transactions_give_none(waits, message):
    """Wait arrays may be None (no waits) for some transactions: the one at fault is still named."""
    with pytest.raises(ValueError, match=message):
        PciRenderer([tx(4, 0x7, 1), tx(20, 0x7, 1, master_waits=waits)], width_bits=32, with_ad=True)


def test_data_given_as_ints_beside_uint64_arrays_is_driven_exactly():
    """NumPy joins a signed and an unsigned 64-bit array as float64, which rounds words above 2**53: a list of
    Python ints beside a transaction's uint64 array still puts every bit on AD (64-bit bus, high half on
    AD[63:32])."""
    high = np.array([0xFFFF_FFFF_FFFF_FFFF, 0x8000_0000_0000_0001], np.uint64)
    arrays, _ = render([tx(2, 0x7, 2, wide=True, data=high), tx(12, 0x7, 2, wide=True, data=[5, 7])], 24, width=64)
    ints, _ = render([tx(2, 0x7, 2, wide=True, data=high), tx(12, 0x7, 2, wide=True, data=np.array([5, 7], np.uint64))],
                     24, width=64)
    assert ints.keys() == arrays.keys()
    for name in ints:
        np.testing.assert_array_equal(ints[name], arrays[name], err_msg=name)
    ad = vec(arrays, "AD", 64)
    assert ad[3] == 0xFFFF_FFFF_FFFF_FFFF and ad[4] == 0x8000_0000_0000_0001
    with pytest.raises(ValueError, match="data must be arrays of integers"):
        PciRenderer([tx(2, 0x7, 2, wide=True, data=high), tx(12, 0x7, 2, wide=True, data=[5.0, 7.5])],
                    width_bits=64, with_ad=True)


def test_64bit_validation():
    with pytest.raises(ValueError, match="memory"):
        PciRenderer([tx(4, 0x3, 1, wide=True)], width_bits=64, with_ad=False)
    with pytest.raises(ValueError, match="QWORD"):
        PciRenderer([tx(4, 0x7, 1, wide=True, address=0x1004)], width_bits=64, with_ad=False)
    with pytest.raises(ValueError, match="subsequent"):
        PciRenderer([tx(4, 0x7, 2, target_waits=np.array([0, 8]))], width_bits=64, with_ad=False)
    with pytest.raises(ValueError):
        busy_clocks(tx(4, 0x7, 1, devsel=0), 32)


# -- the checker catches what it should -------------------------------------------------------------


def _baseline() -> dict:
    """A read at 3 (DEVSEL# 4-6, TRDY# 5-6) and a 64-bit write at 12 (data on 13 and 14)."""
    sig, _ = render([tx(3, 0x6, 2), tx(12, 0x7, 2, wide=True)], 24, width=64)
    return sig


def test_checker_passes_the_baseline():
    assert pcirules.check(_baseline()) == []


@pytest.mark.parametrize(
    ("name", "clocks", "expected"),
    [
        ("IRDY#", [5], "IRDY# deasserted before its data phase completed"),
        ("IRDY#", [3], "IRDY# asserted in an address phase"),
        ("TRDY#", [4], "TRDY# on the AD turnaround"),
        ("DEVSEL#", [6], "TRDY# asserted without DEVSEL#"),
        ("FRAME#", [5], "FRAME# changed while IRDY# waited"),
        ("IRDY#", [6], "FRAME# deasserted without IRDY#"),
        ("FRAME#", [7], "without an idle clock"),
        ("IRDY#", [8], "IRDY# asserted outside a transaction"),
        ("DEVSEL#", [9], "idle bus"),
        ("DEVSEL#", [5], "DEVSEL# deasserted before the final data phase completed"),
        ("STOP#", [5], "STOP# deasserted while FRAME# is still asserted"),
        ("STOP#", [8], "idle bus"),
        ("PERR#", [10], "PERR# without a data parity error"),
        ("PAR", [7], "data parity wrong and no PERR#"),
        ("PAR", [13], "after an address phase"),
        ("PAR64", [15], "data parity wrong and no PERR#"),
        ("C/BE#[1]", [5], "C/BE# changed within a data phase"),
        ("REQ64#", [8], "REQ64# asserted without FRAME#"),
        ("REQ64#", [13], "REQ64# changed without FRAME#"),
        ("ACK64#", [5], "ACK64# without REQ64#"),
        ("ACK64#", [14], "ACK64# changed without DEVSEL#"),
    ],
)
def test_checker_flags_broken_waveforms(name, clocks, expected):
    sig = _baseline()
    sig[name][clocks] ^= 1
    rules = [rule for _, rule in pcirules.check(sig)]
    assert any(expected in rule for rule in rules), rules


def test_checker_flags_write_data_changing_before_trdy():
    sig, _ = render([tx(3, 0x7, 1, target_waits=np.array([2]))], 12)  # IRDY# 4-6, TRDY# 6
    assert pcirules.check(sig) == []
    sig["AD[3]"][5] ^= 1
    assert (5, "AD changed while its data was valid and pending") in pcirules.check(sig)


def _idle(clocks: int) -> dict:
    return {name: np.ones(clocks, np.uint8) for name in channels_for(32, False, False)}


def _assert_low(sig: dict, name: str, first: int, last: int) -> None:
    sig[name][first : last + 1] = 0


def test_checker_flags_timing_the_renderer_refuses():
    slow_target = _idle(30)  # address at 1, TRDY# only 19 clocks later
    for name, first, last in [("FRAME#", 1, 1), ("IRDY#", 2, 20), ("DEVSEL#", 2, 20), ("TRDY#", 20, 20)]:
        _assert_low(slow_target, name, first, last)
    assert (17, "target latency exceeded (16 initial / 8 later)") in pcirules.check(slow_target)
    slow_master = _idle(30)  # IRDY# 11 clocks after FRAME#
    for name, first, last in [("FRAME#", 1, 11), ("IRDY#", 12, 12), ("DEVSEL#", 2, 12), ("TRDY#", 12, 12)]:
        _assert_low(slow_master, name, first, last)
    assert (9, "IRDY# later than 8 clocks into the data phase") in pcirules.check(slow_master)
    late_devsel = _idle(30)  # no DEVSEL# by clock 6 (subtractive, or DAC: no C/BE# to tell), then at 7
    for name, first, last in [("FRAME#", 1, 6), ("IRDY#", 2, 8), ("DEVSEL#", 7, 8), ("STOP#", 8, 8)]:
        _assert_low(late_devsel, name, first, last)
    rules = [rule for _, rule in pcirules.check(late_devsel)]
    assert "DEVSEL# asserted later than subtractive decode (master abort)" in rules
    abort_without_devsel = _idle(30)  # STOP# without DEVSEL# but DEVSEL# never seen
    for name, first, last in [("FRAME#", 1, 2), ("IRDY#", 2, 3), ("STOP#", 3, 3)]:
        _assert_low(abort_without_devsel, name, first, last)
    rules = [rule for _, rule in pcirules.check(abort_without_devsel)]
    assert "STOP# without DEVSEL# (target abort) but no DEVSEL# before" in rules
    ignores_stop = _idle(30)  # FRAME# kept after STOP# although IRDY# is asserted
    for name, first, last in [("FRAME#", 1, 4), ("IRDY#", 2, 5), ("DEVSEL#", 2, 5), ("STOP#", 2, 5)]:
        _assert_low(ignores_stop, name, first, last)
    assert (3, "FRAME# still asserted with IRDY# after STOP#") in pcirules.check(ignores_stop)


# -- property: any valid schedule renders without violations -----------------------------------------


@st.composite
def schedules(draw):
    width = draw(st.sampled_from([32, 64]))
    txs, clk = [], draw(st.integers(0, 4))
    for _ in range(draw(st.integers(1, 6))):
        term = draw(st.sampled_from(TERMINATIONS))
        n = draw(st.integers(0 if term == "target_abort" else 1, 5))
        memory = draw(st.booleans())
        command = draw(st.sampled_from([0x6, 0x7, 0xC, 0xE] if memory else [0x0, 0x2, 0x3, 0xA, 0xB]))
        if term == "master_abort" and draw(st.booleans()):
            command = draw(st.sampled_from(sorted(UNCLAIMED_COMMANDS)))
            memory = False
        wide = width == 64 and memory and draw(st.booleans())
        dac = memory and draw(st.booleans())
        lanes = 0xFF if wide else 0xF
        done = 0 if term in ("retry", "master_abort") else n
        t = PciTransaction(
            start_clk=clk,
            command=command,
            address=(draw(st.integers(1, 7)) << 32 if dac else 0) + draw(st.integers(0, 1 << 20)) * 8,
            data=np.array(draw(st.lists(st.integers(0, 2**64 - 1), min_size=n, max_size=n)), np.uint64),
            byte_enables=np.array(draw(st.lists(st.integers(0, lanes), min_size=n, max_size=n)), np.uint8),
            target_waits=np.array(draw(st.lists(st.integers(0, 3), min_size=n, max_size=n)), np.int64),
            master_waits=np.array(draw(st.lists(st.integers(0, 3), min_size=n, max_size=n)), np.int64),
            devsel=0 if term == "master_abort" else draw(st.integers(1, 4)),
            termination=term,
            wide=wide,
            master=draw(st.sampled_from(["host", "nic"])),
            parity_error_phases=tuple(sorted(draw(st.sets(st.integers(0, done - 1), max_size=2)))) if done else (),
        )
        txs.append(t)
        clk += busy_clocks(t, width) + TURNAROUND_CLOCKS + draw(st.integers(0, 3))
    irq = draw(st.lists(st.tuples(st.integers(0, clk), st.integers(0, 8)), max_size=3))
    return width, txs, [(a, a + d) for a, d in irq], clk + 4


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schedules())
def test_random_schedules_follow_the_protocol(case):
    width, txs, irq, clocks = case
    sig, r = render(txs, clocks, width=width, interrupts=irq)
    assert pcirules.check(sig) == []
    truth = r.truth()
    busy = (sig["FRAME#"] == 0) | (sig["IRDY#"] == 0)
    moved = (sig["IRDY#"] == 0) & (sig["TRDY#"] == 0)
    ad, cbe = vec(sig, "AD", width), vec(sig, "C/BE#", width // 8)
    expected_errors = []
    for row, t in zip(truth, txs):
        window = np.arange(row["ss"], row["es"])
        assert busy[window].all() and not busy[row["es"]] and (row["ss"] == 0 or not busy[row["ss"] - 1])
        assert row["es"] - row["ss"] == busy_clocks(t, width)
        clocks_moved = window[moved[window]]
        assert len(clocks_moved) == row["data_phases"]
        mask = np.uint64(2**64 - 1 if t.wide else 0xFFFFFFFF)
        assert (ad[clocks_moved] & mask).tolist() == (t.data[: len(clocks_moved)] & mask).tolist()
        lanes = 0xFF if t.wide else 0xF
        enables = t.byte_enables[: len(clocks_moved)]
        assert (cbe[clocks_moved] & np.uint64(lanes)).tolist() == [~int(b) & lanes for b in enables]
        assert row["bytes"] == sum(bin(int(b)).count("1") for b in t.byte_enables[: row["data_phases"]])
        expected_errors += [int(clocks_moved[k]) for k in t.parity_error_phases]
    assert pcirules.parity_errors(sig).tolist() == expected_errors
