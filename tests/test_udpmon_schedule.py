"""The order udpmon measures in: interleaved rounds, seeded, and UDPmon's ascending sweep."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from nicrig.udpmon import schedule
from nicrig.udpmon.results import LatencyVisit, latency_tables, send_times_ns


def test_each_round_visits_every_item_once_in_a_fresh_order() -> None:
    plan = schedule.plan(12, 10, "random", np.random.default_rng(3))
    assert [v.round for v in plan] == [r for r in range(10) for _ in range(12)]
    orders = [tuple(v.item for v in plan if v.round == r) for r in range(10)]
    assert all(sorted(o) == list(range(12)) for o in orders) and len(set(orders)) == 10
    assert all([v.position for v in plan if v.round == r] == list(range(12)) for r in range(10))


def test_the_same_seed_gives_the_same_order_and_ascending_is_the_legacy_sweep() -> None:
    a = schedule.plan(8, 3, "random", np.random.default_rng(42))
    b = schedule.plan(8, 3, "random", np.random.default_rng(42))
    assert a == b
    assert [v.item for v in schedule.plan(5, 1, "ascending", np.random.default_rng(1))] == [0, 1, 2, 3, 4]
    with pytest.raises(ValueError):
        schedule.plan(3, 1, "sideways", np.random.default_rng(1))


@given(st.integers(1, 10_000), st.integers(1, 50))
def test_counts_are_shared_out_evenly(count: int, rounds: int) -> None:
    parts = schedule.split(count, rounds)
    assert sum(parts) == count and len(parts) == rounds and max(parts) - min(parts) <= 1


def test_send_times_are_exact_at_the_visits_ends_and_follow_the_round_trips() -> None:
    v = LatencyVisit(0, 0, 64, start_ns=1_000_000, end_ns=1_000_000 + 4 * 12_000 + 4_000,
                     rtt_ns=np.array([10_000, 10_000, -1, 10_000]))
    t = send_times_ns(v)
    # 30 us of round trips known, 22 us not (the engine's own time and the time-out), 5.5 us to each request
    assert list(t - v.start_ns) == [0, 15_500, 31_000, 36_500]
    assert t[-1] + 10_000 + 5_500 == v.end_ns
    rtt, visits = latency_tables([v, LatencyVisit(1, 0, 128, 2_000_000, 2_000_100, np.array([50]))], 1500)
    assert list(rtt["round"]) == [0, 0, 0, 0, 1] and list(visits["requests"]) == [4, 1]
    assert rtt["t_ns"][-1] == 2_000_000
