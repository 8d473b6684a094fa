"""Throughput curves, knee, theoretical maxima (seed 000 3.3, seed 002 3.2 and 9.1)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from nicrig.analysis import throughput
from nicrig.udpmon.command import POINT_DTYPE


def test_seed_000_theoretical_maxima():
    got = throughput.seed000_maxima(1e9)
    # the seed prints them truncated: 428.57 is its "428"
    assert [math.floor(v) for v in got.values()] == [957, 1914, 214, 428, 949]
    assert got["UDP send or receive, 1472-byte datagrams"] == pytest.approx(1472 / 1538 * 1000)
    assert throughput.seed000_maxima(10e9)["UDP 3-way, 18-byte datagrams"] == pytest.approx(2 * 18 / 84 * 10_000)


@pytest.mark.parametrize("payload, wire", [(1472, 1538), (18, 84), (1, 84), (100, 166), (1473, 1538 + 84),
                                           (2952, 1538 + 1538), (2953, 1538 + 1538 + 84)])
def test_wire_bytes_follow_framing_and_fragmentation(payload, wire):
    assert throughput.wire_bytes_per_message(payload) == wire


def test_knee_is_the_smallest_spacing_from_which_nothing_is_lost():
    s = np.array([0, 5, 10, 15, 20, 25.0])
    assert throughput.knee_spacing_us(s, np.array([9, 4, 0, 1, 0, 0])) == 20
    assert throughput.knee_spacing_us(s, np.zeros(6)) == 0
    assert math.isnan(throughput.knee_spacing_us(s, np.array([0, 0, 0, 0, 0, 3])))
    assert math.isnan(throughput.knee_spacing_us(np.zeros(0), np.zeros(0)))


@given(st.lists(st.tuples(st.floats(0, 100), st.integers(0, 5)), min_size=1, max_size=30))
def test_knee_has_no_loss_at_or_beyond_it(points):
    s, lost = np.array([p[0] for p in points]), np.array([p[1] for p in points])
    knee = throughput.knee_spacing_us(s, lost)
    if math.isnan(knee):
        assert lost[s == s.max()].max() > 0
    else:
        assert (lost[s >= knee] == 0).all() and knee in s


def _points(rows: list[dict]) -> np.ndarray:
    out = np.zeros(len(rows), dtype=POINT_DTYPE)
    for k, r in enumerate(rows):
        for name, value in r.items():
            out[k][name] = value
    return out


def test_size_curves_from_a_points_table():
    # the shape of seed 002 figure 4.2: flat at the bottleneck, 1/t beyond it, loss below the knee
    rows = []
    for n, sp in enumerate([8, 10, 12, 14, 20, 40]):
        user = min(720.0, 1472 * 8 / sp)
        lost = 100 if sp < 14 else 0
        rows.append({"point": n, "size_bytes": 1472, "spacing_us": sp, "received": 1000 - lost, "lost": lost,
                     "user_rate_mbps": user, "wire_rate_mbps": user * 1538 / 1472, "remote_cpu_busy_pct": 90.0,
                     "local_cpu_busy_pct": 30.0, "remote_interrupts": 1000 - lost})
    (c,) = throughput.size_curves(_points(rows))
    assert c.size_bytes == 1472 and list(c.spacing_us) == [8, 10, 12, 14, 20, 40]
    assert c.knee_spacing_us == 14 and c.max_user_rate_mbps == 720 and c.spacing_at_max_us == 8
    assert c.theoretical_max_user_mbps == pytest.approx(957.09, abs=0.01)
    assert c.frame_time_on_wire_us == pytest.approx(12.304)
    assert c.loss_pct[0] == pytest.approx(10) and c.receiver_cpu_idle_pct[0] == pytest.approx(10)
    assert c.receiver_interrupts_per_packet[-1] == 1
    assert c.offered_mbps[-1] == pytest.approx(1472 * 8 / 40)
    text = throughput.interpret_curve(c)
    assert "720 Mbit/s" in text and "14 us" in text and "cannot keep up" in text


def test_loopback_curves_have_no_link_limit():
    rows = [{"point": 0, "size_bytes": 64, "spacing_us": 0, "received": 10, "lost": 0, "user_rate_mbps": 100.0,
             "remote_interrupts": -1, "remote_cpu_busy_pct": float("nan"), "local_cpu_busy_pct": float("nan")}]
    (c,) = throughput.size_curves(_points(rows), link_rate_bps=None)
    assert math.isnan(c.theoretical_max_user_mbps) and math.isnan(c.receiver_interrupts_per_packet[0])
    assert math.isinf(c.offered_mbps[0])
    assert "link" not in throughput.interpret_curve(c)
