"""The model's bus clock (acquisition/sim/_clock.c) gives the answers of its Python definition, which it replaced
for speed: edge k at phase + round(k * period) ps, and the first edge at or after a time."""

from __future__ import annotations

import math
import pickle
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from nicrig.acquisition.sim._clock import Clock

#: Periods (ps) of the buses the profiles name (33, 66, 100, 133 MHz PCI/PCI-X) and the probe's 125 MHz.
PERIODS = [1e12 / 33.333333e6, 1e12 / 66.666667e6, 1e12 / 66.666666e6, 1e12 / 100e6, 1e12 / 133.333333e6, 8000.0]


def time_of(phase: int, period: float, clk: int) -> int:
    return phase + round(clk * period)


def at_or_after(phase: int, period: float, t: float) -> int:
    """The definition: the smallest clk >= 0 with time_of(clk) >= t."""
    clk = max(math.ceil((t - phase) / period), 0)
    while clk > 0 and time_of(phase, period, clk - 1) >= t:
        clk -= 1
    while time_of(phase, period, clk) < t:
        clk += 1
    return clk


@settings(max_examples=500, deadline=None)
@given(phase=st.integers(0, 40_000), period=st.one_of(st.sampled_from(PERIODS), st.floats(100.0, 1e6)),
       t=st.one_of(st.integers(-10**6, 10**13), st.floats(-1e6, 1e13, allow_nan=False)),
       nudge=st.integers(-2, 2))
@example(phase=0, period=1e12 / 66.666667e6, t=10**12, nudge=0)
@example(phase=7, period=8000.0, t=8007, nudge=0)  # exactly on an edge
def test_edges_and_times_are_those_of_the_python_definition(phase, period, t, nudge):
    clock = Clock(phase, period)
    want = at_or_after(phase, period, t)
    assert clock.at_or_after(t) == want
    assert clock.at_or_after(t) == want  # the cached answer
    for k in (want - 1, want, want + 1, want + nudge):
        if k >= 0:
            assert clock.time_of(k) == time_of(phase, period, k)
    # an edge's own time maps back to it; a picosecond later, to the next
    edge = clock.time_of(want)
    assert clock.at_or_after(edge) == want and clock.at_or_after(edge + 1) == want + 1


def test_numpy_integers_and_floats_are_times_too_and_bad_arguments_are_refused():
    clock = Clock(3, 15000.0)
    assert clock.at_or_after(np.int64(30_004)) == clock.at_or_after(30_004) == 3
    assert clock.at_or_after(np.float64(30_002.5)) == 2 and clock.time_of(np.int32(2)) == 30_003
    assert clock.at_or_after(-1) == 0 and clock.at_or_after(-1.0) == 0
    with pytest.raises(OverflowError, match="2\\*\\*53"):
        clock.at_or_after(2**60)
    with pytest.raises(ValueError, match="NaN"):
        clock.at_or_after(math.nan)
    with pytest.raises(TypeError):
        clock.at_or_after("10")
    for period in (0.0, -1.0, math.inf, math.nan):
        with pytest.raises(ValueError, match="positive and finite"):
            Clock(0, period)


def test_a_clock_pickles_and_says_what_it_is():
    clock = Clock(1234, 14999.999925)
    again = pickle.loads(pickle.dumps(clock))
    assert (again.phase_ps, again.period_ps) == (1234, 14999.999925)
    assert again.at_or_after(10**9) == clock.at_or_after(10**9) == 66667
    assert repr(clock) == "Clock(phase_ps=1234, period_ps=14999.999925)"


@settings(max_examples=300, deadline=None)
@given(phase=st.integers(0, 40_000), period=st.one_of(st.sampled_from(PERIODS), st.floats(100.0, 1e6)),
       first=st.integers(-10**6, 10**12), n=st.integers(0, 300),
       picks=st.lists(st.integers(-10**6, 10**12), max_size=50))
def test_edge_times_in_bulk_are_time_of_each_edge(phase, period, first, n, picks):
    """time_range and times_of fill int64 arrays with what time_of (and the Python definition) gives edge by
    edge: the rig's block timestamps and truth tables are these, and must not change with the method."""
    clock = Clock(phase, period)
    out = np.full(n, -1, dtype=np.int64)
    assert clock.time_range(first, out) is out
    assert out.tolist() == [time_of(phase, period, k) for k in range(first, first + n)]
    clocks = np.array(picks, dtype=np.int64)
    times = clock.times_of(clocks, np.empty(len(clocks), dtype=np.int64))
    assert times.tolist() == [clock.time_of(k) for k in picks] == [time_of(phase, period, k) for k in picks]


def test_bulk_edge_times_read_and_write_strided_columns():
    """A structured table's columns are strided views: times_of reads one and writes another in place."""
    clock = Clock(17, 1e12 / 66.666667e6)
    table = np.zeros(5, dtype=[("ss", "<i8"), ("kind", "S3"), ("t_ps", "<i8")])
    table["ss"] = [0, 1, 2, 10**9, 3]
    clock.times_of(table["ss"], table["t_ps"])
    assert table["t_ps"].tolist() == [time_of(17, clock.period_ps, k) for k in table["ss"].tolist()]
    assert table["kind"].tolist() == [b""] * 5
    every_other = np.zeros(8, dtype=np.int64)
    clock.time_range(4, every_other[::2])
    assert every_other.tolist() == [clock.time_of(4), 0, clock.time_of(5), 0, clock.time_of(6), 0, clock.time_of(7), 0]


def test_bulk_edge_times_refuse_what_they_cannot_fill_exactly():
    clock = Clock(0, 15000.0)
    for bad in (np.zeros(3, np.int32), np.zeros(3, np.float64), np.zeros(3, np.uint64), np.zeros((2, 2), np.int64),
                np.zeros(3, ">i8")):
        with pytest.raises(TypeError, match="int64"):
            clock.time_range(0, bad)
        with pytest.raises(TypeError, match="int64"):
            clock.times_of(bad, np.zeros(bad.shape[0], np.int64))
    read_only = np.zeros(3, np.int64)
    read_only.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        clock.time_range(0, read_only)
    with pytest.raises(ValueError, match="3 clocks, 2 places"):
        clock.times_of(np.zeros(3, np.int64), np.zeros(2, np.int64))
    with pytest.raises(OverflowError):
        clock.times_of(np.array([0, 2**62], np.int64), np.zeros(2, np.int64))
    with pytest.raises(OverflowError):
        clock.time_range(2**63 - 2, np.zeros(3, np.int64))
    with pytest.raises(TypeError):
        clock.time_range(0, bytearray(8))


@pytest.mark.parametrize("period", [2.5, 0.5, 1.5, 8000.0, 1e12 / 66.666667e6])
def test_ties_and_products_near_two_to_the_51_round_as_python_does(period):
    """Products exactly halfway (k * 2.5 for odd k: to even, as round()) and around 2**51, where the clock's
    inline rounding hands over to rint(), in both signs."""
    clock = Clock(11, period)
    near = int(2**51 / period)
    for first in (-41, -7, 0, 1, near - 20, -near - 20, 2 * near):
        out = clock.time_range(first, np.empty(40, dtype=np.int64))
        assert out.tolist() == [time_of(11, period, k) for k in range(first, first + 40)]
        assert [clock.time_of(k) for k in range(first, first + 40)] == out.tolist()


def test_a_clock_is_whole_from_its_making_and_never_changes():
    """No Clock without phase and period (Clock.__new__(Clock) once made one of period 0, whose at_or_after
    stepped forever), none re-made in place by __init__, and no period whose edges leave int64 (edge 1 of a
    1e20 ps period was no long long: at_or_after stepped forever too)."""
    with pytest.raises(TypeError):
        Clock.__new__(Clock)
    clock = Clock(3, 15000.0)
    clock.__init__(5, 8000.0)
    assert (clock.phase_ps, clock.period_ps, clock.time_of(2)) == (3, 15000.0, 30003)
    for period in (2.0**53, 1e20, 1e300):
        with pytest.raises(OverflowError, match="period beyond 2\\*\\*53"):
            Clock(0, period)
    assert Clock(0, 2.0**53 - 1).at_or_after(5) == 1


def test_at_or_after_answers_or_refuses_any_time_and_period_at_once():
    """Times beyond 2**53 ps are refused as floats as they are as ints (at_or_after(inf) or (1e300) once made a
    guess beyond int64 and stepped forever), and a period far below a picosecond, where ~1 / (2 * period) edges
    share each picosecond, gives the first edge at once (from t / period it stepped back over all of them).
    In a child, so that a hang fails the test, not the run."""
    code = """if True:
        import math
        from nicrig.acquisition.sim._clock import Clock
        for t in (math.inf, -math.inf, 1e300, 2.0**53):
            try:
                Clock(0, 1000.0).at_or_after(t)
            except OverflowError as e:
                assert "2**53" in str(e), e
            else:
                raise AssertionError(t)
        try:
            Clock(0, 1e-300).at_or_after(1e6)
        except OverflowError as e:
            assert "2**62" in str(e), e
        else:
            raise AssertionError("1e-300")
        for period, t in ((1e-12, 1000), (3e-7, 12345.5), (0.25, 7)):
            clock = Clock(2, period)
            k = clock.at_or_after(t)
            assert clock.time_of(k) >= t > clock.time_of(k - 1), (period, t, k)
    """
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_time_of_refuses_an_edge_beyond_int64_as_the_bulk_methods_do():
    """time_of(2**62) of a 1000 ps clock once gave -2**63 (the product's conversion to long long, undefined in
    C, as x86 does it); it is refused as time_range and times_of refuse it."""
    clock = Clock(0, 1000.0)
    for clk in (2**62, -(2**62), 2**53, 2**63 - 1):
        with pytest.raises(OverflowError, match="2\\*\\*62"):
            clock.time_of(clk)
        with pytest.raises(OverflowError, match="2\\*\\*62"):
            clock.times_of(np.array([clk], np.int64), np.zeros(1, np.int64))
    assert clock.time_of(4_611_686_018_427) == time_of(0, 1000.0, 4_611_686_018_427)
