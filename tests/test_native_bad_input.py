"""The simulator's C entry points on input from anywhere: every argument of a wrong type, a short, long, strided,
read-only or zero-dimensional array, a wrong item size and integers far out of range get a Python exception, and
whatever they accept gives the answer of the definition (the product's rule: bad input gets a clear exception,
never a crash or a hang). The definitions are written out here from each module's documentation; the modules'
own tests check the usual input in depth (test_pci_render, test_sim_clock, test_h5_chunks, test_ethernet_gmii).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from nicrig._h5shuffle import shuffle
from nicrig.acquisition.sim import _inet, _pci_render
from nicrig.acquisition.sim._clock import Clock
from nicrig.acquisition.sim._gmii_pack import pack
from nicrig.gui._fold import fold

#: What a C entry point may raise on bad input (BufferError: an object exporting no buffer of the kind asked).
REFUSED = (TypeError, ValueError, OverflowError, BufferError)

INTS = st.one_of(st.integers(-5, 40), st.integers(-(2**64), 2**64), st.sampled_from([2**63 - 1, -(2**63), 2**31]))


@st.composite
def arrays(draw, length: int | None = None) -> object:
    """An array-like of some dtype, length, layout and writability, or something that is no array."""
    kind = draw(st.sampled_from(["array", "array", "array", "scalar", "other"]))
    if kind == "other":
        return draw(st.sampled_from([None, 3, "abc", b"abcd", [1, 2, 3], 1.5, object()]))
    dtype = draw(st.sampled_from([np.uint8, np.int8, np.int64, np.uint64, np.int32, np.float64, np.bool_, ">i8"]))
    if kind == "scalar":
        return np.array(draw(st.integers(0, 1)), dtype)
    n = length if length is not None and draw(st.booleans()) else draw(st.integers(0, 12))
    step = draw(st.sampled_from([1, 1, 2, -1]))
    base = np.arange(n * abs(step), dtype=np.int64) % 7
    a = base.astype(dtype)[::step]
    if draw(st.booleans()):
        a = a.reshape(1, -1) if draw(st.booleans()) else a
    if draw(st.integers(0, 4)) == 0:
        a.flags.writeable = False
    return a


def _gmii_definition(n: int, lines: list, copy: int) -> bytes:
    """pack()'s documentation: byte 0 = TX_EN, TXD[0..5]; byte 1 = TXD[6..7], RX_DV, RXD[0..3] (after TX_ER and
    RX_ER, left low); byte 2 = RXD[4..7], and TX_EN again on channel `copy` (20 to 23) unless -1."""
    txd, tx_en, rxd, rx_dv = (np.zeros(n, np.int64) if x is None else np.asarray(x, np.int64) for x in lines)
    tx_en, rx_dv = tx_en & 1, rx_dv & 1
    b0 = (txd << 2 | tx_en) & 0xFF
    b1 = (txd >> 6 | rx_dv << 2 | rxd << 4) & 0xFF
    b2 = (rxd >> 4 | (tx_en << (copy - 16) if copy != -1 else 0)) & 0xFF
    return np.stack([b0, b1, b2], axis=1).astype(np.uint8).tobytes()


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), n=st.integers(0, 10))
def test_gmii_pack_refuses_or_packs_as_documented(data, n):
    out = data.draw(st.one_of(arrays(3 * n), st.just(np.zeros((n, 3), np.uint8))))
    lane = data.draw(st.sampled_from(["lines", "lines", "none", "mixed"]))
    lines = [data.draw(arrays(n)) for _ in range(4)]
    if lane == "none":
        lines = [None] * 4
    copy = data.draw(st.one_of(st.sampled_from([-1, 20, 23]), INTS))
    try:
        got = pack(out, *lines, copy)
    except REFUSED:
        event("refused")
        return
    event("accepted")
    # accepted: byte lines of n clocks (or idle lanes) and an out of 3 * n writable bytes, as documented
    assert got is out and out.dtype == np.uint8
    clocks = out.nbytes // 3
    for line in lines:
        assert line is None or (isinstance(line, np.ndarray) and line.itemsize == 1 and line.size == clocks)
    assert out.tobytes() == _gmii_definition(clocks, lines, copy)


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=40), size=INTS)
def test_shuffle_refuses_or_gives_hdf5s_planes(data, size):
    try:
        got = shuffle(data, size)
    except REFUSED:
        assert size < 1 or size >= 2**63
        return
    whole = len(data) // size * size  # no whole element (size beyond the data): the bytes as they are
    assert got == b"".join(data[j:whole:size] for j in range(size if whole else 0)) + data[whole:]


@settings(max_examples=300, deadline=None)
@given(data=st.one_of(st.binary(max_size=60), arrays()), unit=INTS, width=INTS,
       keep=st.one_of(st.none(), st.integers(-2, 5), st.sampled_from([2**31, -(2**31) - 1])))
def test_fold_refuses_or_gives_each_groups_and_and_or(data, unit, width, keep):
    """fold(data, unit, width[, keep]): the AND and the OR of every width consecutive unit-byte rows of data,
    the one not kept (keep 1: the AND, 2: the OR, 3 or none given: both) None."""
    try:
        a, o = fold(data, unit, width) if keep is None else fold(data, unit, width, keep)
    except REFUSED:
        event("refused")
        return
    event("accepted")
    raw = memoryview(data).tobytes()
    assert 1 <= unit < 2**63 and 1 <= width < 2**63 and len(raw) % unit == 0
    assert keep in (None, 1, 2, 3)
    rows = [raw[k:k + unit] for k in range(0, len(raw), unit)]
    groups = [rows[k:k + width] for k in range(0, len(rows), width)]
    ands = b"".join(bytes(_all(r[b] for r in g) for b in range(unit)) for g in groups)
    ors = b"".join(bytes(_any(r[b] for r in g) for b in range(unit)) for g in groups)
    assert a == (ands if keep in (None, 1, 3) else None)
    assert o == (ors if keep in (None, 2, 3) else None)


def _all(values) -> int:
    out = 0xFF
    for v in values:
        out &= v
    return out


def _any(values) -> int:
    out = 0
    for v in values:
        out |= v
    return out


TIMES = st.one_of(INTS, st.floats(allow_nan=True, allow_infinity=True), st.sampled_from(["1", None, np.int64(7)]))
PERIODS = st.one_of(st.floats(allow_nan=True, allow_infinity=True), INTS, st.sampled_from([1e-300, 1e-9, 0.5, 8000.0]))


@settings(max_examples=500, deadline=None)
@given(phase=INTS, period=PERIODS, t=TIMES, clk=INTS, first=INTS, n=st.integers(0, 5))
def test_clock_refuses_or_answers_as_its_definition(phase, period, t, clk, first, n):
    """Edge k at phase + round(k * period) ps; at_or_after(t) the least k >= 0 whose edge is at or after t."""
    try:
        clock = Clock(phase, period)
    except REFUSED:
        event("refused")
        return
    event("accepted")
    assert 0 < clock.period_ps < 2**53 and abs(clock.phase_ps) < 2**53

    def edge(k: int) -> int:
        return phase + round(k * clock.period_ps)

    try:
        got = clock.time_of(clk)
    except REFUSED:
        assert abs(clk * clock.period_ps) >= 2**62 or not -(2**63) <= clk < 2**63
    else:
        assert got == edge(clk)
    try:
        k = clock.at_or_after(t)
    except REFUSED:
        # refused: no time, not below 2**53 ps, or an answer whose edge number passes 2**62 (its rounded product
        # reaches ceil(t) - phase where the product passes that less 1/2)
        assert (not isinstance(t, (int, float)) or math.isnan(t) or abs(t) >= 2**53
                or (math.ceil(t) - phase - 0.5) / clock.period_ps >= 2**61)
    else:
        assert k >= 0 and edge(k) >= t and (k == 0 or edge(k - 1) < t)
    out = np.full(n, -1, np.int64)
    try:
        clock.time_range(first, out)
    except REFUSED:
        assert not -(2**63) <= first <= 2**63 - 1 - n or any(abs(k * clock.period_ps) >= 2**62
                                                            for k in range(first, first + n))
    else:
        assert out.tolist() == [edge(k) for k in range(first, first + n)]


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_clock_bulk_methods_refuse_what_is_no_int64_column(data):
    clock = Clock(3, 15000.0)
    clocks, out = data.draw(arrays()), data.draw(arrays())
    try:
        clock.times_of(clocks, out)
    except REFUSED:
        event("refused")
        return
    event("accepted")
    assert clocks.dtype == np.int64 and out.dtype == np.int64 and clocks.ndim == out.ndim == 1
    assert out.tolist() == [3 + round(k * 15000.0) for k in clocks.tolist()]


@settings(max_examples=300, deadline=None)
@given(data=st.data(), c0=INTS, first_bit=INTS, idle=INTS)
def test_paint_refuses_what_it_cannot_read(data, c0, first_bit, idle):
    out = data.draw(arrays())
    signals = data.draw(st.lists(st.one_of(st.tuples(arrays(), arrays()), st.sampled_from([(), 3, None])),
                                 max_size=3))
    try:
        _pci_render.paint(out, c0, first_bit, idle, signals)
    except REFUSED:
        event("refused")
        return
    event("accepted")
    assert out.dtype.kind == "u" and out.ndim == 1 and out.flags.c_contiguous


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_phases_refuses_arrays_that_are_short_long_or_of_another_kind(data):
    n = data.draw(st.integers(0, 3))
    args = [data.draw(st.one_of(arrays(n), st.just(np.zeros(n, np.int64)))) for _ in range(14)]
    try:
        _pci_render.phases(*args)
    except REFUSED:
        event("refused")
        return
    event("accepted")
    assert all(isinstance(a, np.ndarray) and a.dtype == np.int64 and a.ndim == 1 for a in args)


def test_gather_refuses_what_is_not_its_arguments():
    from nicrig.acquisition.sim.pci_bus import TERMINATIONS, PciTransaction

    for bad in [((), TERMINATIONS, PciTransaction), ([], list(TERMINATIONS), PciTransaction),
                ([], TERMINATIONS, 3), ([], TERMINATIONS, int)]:
        with pytest.raises(REFUSED + (AttributeError,)):
            _pci_render.gather(*bad)
    assert _pci_render.gather([1, "x", None], TERMINATIONS, PciTransaction) is None


def _in_child(code: str) -> str:
    """Run ``code`` in a fresh interpreter (a crash there must not take the test run with it): what it printed,
    after asserting it ended normally (a crash ends in a signal: a negative return code)."""
    import subprocess
    import sys
    import textwrap

    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"child ended with {done.returncode}: {done.stderr[-2000:]}"
    return done.stdout


def test_bind_takes_a_slot_only_of_the_class_or_a_base():
    """A member descriptor of another class set on the class is an offset into that class's instances: bind()
    took it, and resume() then read a float's value as an object (segfault); _bus.bind finds slots the same way
    (through _scheduler's capsule) and would have made transactions with another class's offsets."""
    out = _in_child("""
        from nicrig.acquisition.sim import _bus, _scheduler, scheduler
        from nicrig.acquisition.sim.model import BusRecord, CsrAccess, DmaBurst
        from nicrig.acquisition.sim.pci_bus import TURNAROUND_CLOCKS, PciTransaction

        class Other:
            __slots__ = ("a",)

        class Foreign(float):
            pass

        for name in ("env", "_generator", "_target", "_wake", *PciTransaction.__dataclass_fields__):
            setattr(Foreign, name, Other.__dict__["a"])
        try:
            _scheduler.bind(scheduler.Signal, scheduler.Later, scheduler.Engine, Foreign)
        except TypeError as e:
            print("bind refused:", e)
        try:
            _scheduler.resume(Foreign(1.5))
        except TypeError as e:
            print("resume refused:", e)
        try:
            _bus.bind(BusRecord, DmaBurst, CsrAccess, Foreign, scheduler.Engine, scheduler.Process, scheduler.Later,
                      TURNAROUND_CLOCKS)
        except TypeError as e:
            print("bus bind refused:", e)
    """)
    assert out.count("refused:") == 3 and "is not a __slots__ member" in out, out


def test_advance_refuses_a_queue_changed_by_the_comparison_with_before():
    """`before`'s comparison is Python code: it replaced the queue's head, which was then freed and a 1-tuple
    popped and read as (time, priority, id, item) (segfault under ASan)."""
    out = _in_child("""
        from nicrig.acquisition.sim import scheduler

        env = scheduler.Engine()
        env.call_in(5, lambda: print("called"))

        class Before:
            def __gt__(self, other):
                env._queue[0] = ("x",)
                return True

        try:
            env.advance(Before())
        except RuntimeError as e:
            print("RuntimeError:", e)
    """)
    assert out == "RuntimeError: the event queue's head changed during a comparison\n", out


def test_register_access_stops_at_the_first_bad_argument():
    """delayed_read's truth failed and retries was still read, running its __index__ with the exception pending
    (Python then replaced it with a SystemError): the first error is the one raised, nothing run after it."""
    from nicrig.acquisition.sim import _bus, model  # noqa: F401  (model binds _bus)

    class Untrue:
        def __bool__(self):
            raise ZeroDivisionError("no truth")

    read = []

    class Retries:
        def __index__(self):
            read.append(1)
            return 3

    with pytest.raises(ZeroDivisionError, match="no truth"):
        _bus.register_access(None, None, None, None, Retries(), Untrue(), 0, 0)
    assert read == []


def test_a_bus_claim_holds_what_python_code_it_runs_may_replace():
    """A claim runs Python code: the bus's clock methods, the old free clock's __del__ and the wide flag's truth.
    The claim's time (env._now) and the bus's lists were borrowed across it: a clock that moved env._now freed
    the time the claim still used, and a free clock or flag that set the bus's lists anew had the claim append to
    freed lists (here reused as new ones, which got the claim's entries)."""
    out = _in_child("""
        import numpy as np
        from nicrig.acquisition.sim import _bus, profiles
        from nicrig.acquisition.sim.model import BusRecord, dma_plan
        from nicrig.acquisition.sim.scheduler import Engine

        plan = dma_plan(600, 0, write=False, width_bits=64, nic_burst=256, host_cut=4096, initial_wait=2,
                        master_wait_every=0)
        words = np.zeros(75, np.uint64)

        def run_dma(env, bus, wide, make_now=None):
            def dma():
                if make_now is not None:
                    env._now = make_now()  # held by env only
                yield _bus.bursts(env, bus, plan, 0x1000, words, "tx_data", 45_000, wide)
            env.process(dma())
            env.run()

        freed = []

        class Now(int):
            def __del__(self):
                freed.append(int(self))

        env, bus = Engine(), BusRecord(profiles.load("bus", "pci64-66"), 0)
        at_or_after, time_of, seen = bus.clock_at_or_after, bus.time_of, []

        def moving_clock(t):
            env._now = int(t)
            return at_or_after(t)

        def watched_time_of(clk):
            seen.append(bool(freed))
            return time_of(clk)

        bus.clock_at_or_after, bus.time_of = moving_clock, watched_time_of
        run_dma(env, bus, True, lambda: Now(10**12))
        print("time freed during its claim:", seen[0], len(seen))  # the first claim's (the next ones come after it)

        spares = []

        def renew(bus):
            bus.transactions, bus.purposes, bus.wide = [], [], []
            spares.append([])
            spares.append([])
            spares.append([])

        class Wide:
            def __bool__(self):
                renew(bus)
                return True

        class FreeClk(int):
            def __del__(self):
                renew(bus)

        env, bus = Engine(), BusRecord(profiles.load("bus", "pci64-66"), 0)
        run_dma(env, bus, Wide())
        env, bus = Engine(), BusRecord(profiles.load("bus", "pci64-66"), 0)
        bus.free_clk = FreeClk(0)
        run_dma(env, bus, False)
        print("spare lists:", len(spares), "written:", sum(map(len, spares)))
    """)
    assert out == "time freed during its claim: False 3\nspare lists: 12 written: 0\n", out


def test_bus_entry_points_refuse_what_is_not_of_the_bound_classes():
    """bursts() and register_access() read their arguments' slots at the offsets of the classes bind() was given:
    anything else was read as if it were one (bursts of ints: segfault; register_access: arbitrary memory). Each
    is refused with a TypeError naming it, before anything is read or queued."""
    out = _in_child("""
        import numpy as np
        from nicrig.acquisition.sim import _bus, profiles
        from nicrig.acquisition.sim.model import BusRecord, CsrAccess, dma_plan
        from nicrig.acquisition.sim.pci_bus import PciTransaction
        from nicrig.acquisition.sim.scheduler import Engine

        env, bus = Engine(), BusRecord(profiles.load("bus", "pci64-66"), 0)
        plan = dma_plan(600, 0, write=False, width_bits=64, nic_burst=256, host_cut=4096, initial_wait=2,
                        master_wait_every=0)
        template = PciTransaction(0, 0x7, 0x3818, np.array([0x3818], np.uint64), np.array([0xF], np.uint8),
                                  master="host", kind="csr")
        shape = CsrAccess(True, template, 4, 3)
        calls = [
            (_bus.bursts, (1, 2, (3,), 0, b"", "p", 5, True)),
            (_bus.bursts, (env, 2, plan, 0, b"", "p", 5, True)),
            (_bus.bursts, (env, bus, plan + (3,), 0, b"", "p", 5, True)),
            (_bus.register_access, (1, 2, 3, 7, 0, False, 0, 0)),
            (_bus.register_access, (env, bus, None, 7, 0, False, 0, 0)),
            (_bus.register_access, (env, bus, None, CsrAccess(True, 7.5, 4, 3), 0, False, 0, 0)),
            (_bus.register_access, (env, bus, None, shape, 0, False, 0, 0)),
        ]
        for call, args in calls:
            try:
                call(*args)
            except (TypeError, RuntimeError) as e:
                print(type(e).__name__, e)
        print(len(bus.transactions), len(env._queue))
    """)
    assert out.splitlines() == [
        "TypeError bursts()'s env must be of class Engine, not int",
        "TypeError bursts()'s bus must be of class BusRecord, not int",
        "TypeError each burst of bursts()'s plan must be of class DmaBurst, not int",
        "TypeError register_access()'s env must be of class Engine, not int",
        "TypeError register_access()'s shape must be of class CsrAccess, not int",
        "TypeError a register access's template must be of class PciTransaction, not float",
        "RuntimeError a Later is made by the Process that waits for it",
        "0 0",
    ], out


@pytest.mark.parametrize("args", [
    (b"\x00", b"\x00" * 6, b""),  # odd prefix: the payload's words would be summed misaligned
    (b"", b"\x00" * 5, b""), (b"", b"\x00" * 8, b""),  # a UDP head is 6 bytes
    (bytearray(2), b"\x00" * 6, b""), (b"", "abcdef", b""), (b"", b"\x00" * 6, None), (b"", b"\x00" * 6),
])
def test_udp_datagram_refuses_what_is_no_datagram(args: tuple) -> None:
    """Only bytes, a 6-byte UDP head and an even prefix (its sum checked against Scapy's in test_ethernet_gmii)."""
    with pytest.raises(REFUSED):
        _inet.udp_datagram(*args)
