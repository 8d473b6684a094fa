"""Throughput curves, knee, theoretical maxima (seed 000 3.3, seed 002 3.2 and 9.1)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from nicrig.analysis import throughput
from nicrig.udpmon.results import POINT_DTYPE


def test_seed_000_theoretical_maxima():
    got = throughput.pai_rixner_kim_2004_maxima(1e9)
    # the seed prints them truncated: 428.57 is its "428"
    assert [math.floor(v) for v in got.values()] == [957, 1914, 214, 428, 949]
    assert got["UDP send or receive, 1472-byte datagrams"] == pytest.approx(1472 / 1538 * 1000)
    ten = throughput.pai_rixner_kim_2004_maxima(10e9)
    assert ten["UDP 3-way, 18-byte datagrams"] == pytest.approx(2 * 18 / 84 * 10_000)


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
                     "user_rate_mbps": user, "user_rate_ci95_mbps": 5.0, "wire_rate_mbps": user * 1538 / 1472,
                     "remote_cpu_busy_pct": 90.0,
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
    assert "720.0 ± 5.0 Mbit/s" in text and "no loss from 14 us" in text and "loss at 8, 10 and 12 us" in text
    assert "idle as little as 10% of the time" in text and "cannot keep up" in text
    assert "75.23 ± 0.52 % of the 957.1 Mbit/s" in text


def test_loopback_curves_have_no_link_limit():
    rows = [{"point": 0, "size_bytes": 64, "spacing_us": 0, "received": 10, "lost": 0, "user_rate_mbps": 100.0,
             "remote_interrupts": -1, "remote_cpu_busy_pct": float("nan"), "local_cpu_busy_pct": float("nan")}]
    (c,) = throughput.size_curves(_points(rows), link_rate_bps=None)
    assert math.isnan(c.theoretical_max_user_mbps) and math.isnan(c.receiver_interrupts_per_packet[0])
    assert math.isinf(c.offered_mbps[0])
    assert "link" not in throughput.interpret_curve(c)


# -- stream rates: bursts, the line rate, rounds -----------------------------------------------------------

def _coalesced(rng: np.random.Generator, n: int, spacing_ns: float, timer_ns: float, *, size: int = 1472,
               link: float = 1e9) -> tuple[np.ndarray, np.ndarray]:
    """Wire arrivals of a paced stream (never closer than the frame's wire time) and the receive timestamps a NIC
    with an interrupt coalescence timer gives them: each interrupt stamps every frame that arrived since the last,
    0.5 us apart (the driver's work per frame)."""
    frame = throughput.wire_bytes_per_message(size) * 8e9 / link
    arrivals = 1e9 + np.cumsum(np.maximum(spacing_ns + rng.normal(0, 300, n), frame))
    stamps = np.empty(n)
    k = 0
    while k < n:
        irq = arrivals[k] + timer_ns
        j = int(np.searchsorted(arrivals, irq, side="right"))
        stamps[k:j] = irq + 500 * np.arange(1, j - k + 1)
        k = j
    return arrivals, stamps.astype(np.int64)


def test_a_coalesced_stream_at_the_line_never_reads_above_it() -> None:
    """A fault once shipped: 300 coalesced 1472-byte datagrams at the line read 967 Mbit/s first to last."""
    rng = np.random.default_rng(1)
    line = throughput.theoretical_max_user_mbps(1472)
    naive_over = 0
    for _ in range(200):
        a, t = _coalesced(rng, 300, 12_304, 70_000)
        naive_over += (299 * 1472 * 8e3 / (t[-1] - t[0])) > line
        r = throughput.receive_rate(t, np.arange(300), 1472, link_rate_bps=1e9)
        assert r.user_rate_mbps <= line * (1 + 1e-12) and r.wire_limited
        assert r.user_rate_mbps == pytest.approx(299 * 1472 * 8e3 / (a[-1] - a[0]), rel=0.002)
    assert naive_over > 150  # the first-to-last estimator does exceed it


@pytest.mark.parametrize("spacing_ns, n", [(12_304, 300), (15_000, 2000), (20_000, 300), (40_000, 2000)])
def test_receive_rates_of_coalesced_streams_are_unbiased_and_covered(spacing_ns: float, n: int) -> None:
    rng = np.random.default_rng(int(spacing_ns) + n)
    errors, covered = [], 0
    for _ in range(200):
        a, t = _coalesced(rng, n, spacing_ns, 70_000)
        truth = (n - 1) * 1472 * 8e3 / (a[-1] - a[0])
        r = throughput.receive_rate(t, np.arange(n), 1472, link_rate_bps=1e9)
        errors.append(r.user_rate_mbps / truth - 1)
        covered += abs(r.user_rate_mbps - truth) <= r.user_rate_ci95_mbps
    assert abs(np.mean(errors)) < 0.001
    assert covered >= 0.95 * 200


@given(st.lists(st.integers(1, 10**9), min_size=2, max_size=300), st.sampled_from([64, 1472, 3000]),
       st.sampled_from([100e6, 1e9, 10e9]))
def test_no_timestamps_whatever_give_a_rate_above_the_line(stamps, size, link) -> None:
    t = np.sort(np.array(stamps, dtype=np.int64))
    r = throughput.receive_rate(t, np.arange(t.size), size, link_rate_bps=link)
    if math.isfinite(r.user_rate_mbps):
        assert r.user_rate_mbps <= throughput.theoretical_max_user_mbps(size, link) * (1 + 1e-9)


def test_duplicates_and_missing_timestamps_are_left_out() -> None:
    t = np.array([1_000, 2_000, 2_000, -1, 5_000, 6_000, 7_000], dtype=np.int64) * 1000
    seq = np.array([0, 1, 1, 2, 3, 4, 5])
    r = throughput.receive_rate(t, seq, 1000)  # no link: every datagram its own batch
    assert r.packets == 5 and r.duration_ns == 6e6 and not r.wire_limited
    assert r.user_rate_mbps == pytest.approx(4 * 1000 * 8 / 6000)


def test_rounds_of_a_point_give_its_mean_and_a_t_interval() -> None:
    rows = [{"point": k, "round": k, "size_bytes": 1000, "spacing_us": 20.0, "received": 1000, "lost": 0,
             "user_rate_mbps": v, "user_rate_ci95_mbps": 0.1, "remote_interrupts": 10, "sent": 1000}
            for k, v in enumerate([390.0, 400.0, 410.0])]
    (c,) = throughput.size_curves(_points(rows))
    assert c.rounds[0] == 3 and c.user_rate_mbps[0] == pytest.approx(400)
    assert c.user_rate_ci95_mbps[0] == pytest.approx(4.303 * 10 / math.sqrt(3), rel=1e-3)
    assert c.sent[0] == 3000 and c.receiver_interrupts_per_packet[0] == pytest.approx(0.01)
    (one,) = throughput.size_curves(_points(rows[:1]))
    assert one.user_rate_ci95_mbps[0] == 0.1  # one round: the stream's own interval


@pytest.mark.parametrize("lost, said", [
    ([0, 0, 0], "nothing was lost at any spacing"),
    ([5, 3, 1], "packets were lost at every spacing measured, 0, 20 and 40 us"),
    ([0, 7, 2], "packets were lost at 20 and 40 us spacing but not at 0 us: the loss does not fall off"),
    ([9, 0, 0], "no loss from 20 us spacing on, loss at 0 us"),
])
def test_the_loss_sentence_says_where_loss_was_seen(lost, said) -> None:
    """A fault once shipped: 'lost even at the widest spacing' while the 0 us point lost nothing."""
    rows = [{"point": k, "size_bytes": 1472, "spacing_us": sp, "received": 1000 - n, "lost": n, "sent": 1000,
             "user_rate_mbps": 500.0, "user_rate_ci95_mbps": 1.0, "remote_interrupts": -1}
            for k, (sp, n) in enumerate(zip((0.0, 20.0, 40.0), lost))]
    (c,) = throughput.size_curves(_points(rows), link_rate_bps=None)
    text = throughput.interpret_curve(c)
    assert said in text
    assert "limit" not in text  # no link was named: no reading of what limits the rate
