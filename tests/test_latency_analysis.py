"""Latency arithmetic: fragmentation, statistics, histograms, the lines per frame count, the intercept's reading.

The estimator's statistics (coverage, flags, FWHM, modes) are in
``test_latency_estimator.py``.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from nicrig.analysis import latency
from nicrig.analysis.latency import frames_per_message, histogram, rtt_stats


@pytest.mark.parametrize("payload, mtu, frames", [
    (1, 1500, 1), (1472, 1500, 1), (1473, 1500, 2), (2952, 1500, 2), (2953, 1500, 3),
    (8972, 9000, 1), (8973, 9000, 2), (548, 576, 1), (549, 576, 2),
])
def test_frames_per_message_follows_ipv4_fragmentation(payload, mtu, frames):
    assert frames_per_message(payload, mtu) == frames


def test_frames_agree_with_the_simulators_fragmenter():
    from nicrig.acquisition.sim.ethernet import udp_frames

    for payload in (1, 1472, 1473, 2952, 2953, 4000):
        built = udp_frames(bytes(payload), src_mac="02:00:00:00:00:01", dst_mac="02:00:00:00:00:02",
                           src_ip="198.18.0.1", dst_ip="198.18.0.2", sport=1, dport=2, ip_id=7)
        assert len(built) == frames_per_message(payload)


def test_statistics_of_known_round_trips():
    rtt_ns = np.array([10_000, 11_000, 11_000, 12_000, 30_000, -1])
    s = rtt_stats(rtt_ns)
    assert (s.count, s.timeouts) == (5, 1)
    assert (s.min_us, s.median_us, s.max_us) == (10.0, 11.0, 30.0)
    assert s.mean_us == pytest.approx(14.8)
    assert np.isnan(s.fwhm_us)  # too few round trips for a density


def test_histogram_counts_every_value_once():
    edges, counts = histogram(np.array([5.2, 5.9, 6.0, 9.99]), bin_us=1.0)
    assert list(edges) == [5.0, 6.0, 7.0, 8.0, 9.0] and list(counts) == [2, 1, 0, 0, 1]


@given(st.lists(st.floats(0.5, 1e4), min_size=1, max_size=200), st.sampled_from([0.5, 1.0, 2.0]))
def test_histogram_conserves_counts(values, bin_us):
    edges, counts = histogram(np.array(values), bin_us)
    assert counts.sum() == len(values) and edges[0] <= min(values)


def _rounds_table(rtt_us: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """A ``latency/rtt`` table of (rounds, sizes, round trips) values, sizes in ascending position."""
    n_r, n_s, per = rtt_us.shape
    t = np.zeros(rtt_us.size, dtype=[("size_bytes", "<i4"), ("round", "<i4"), ("position", "<i4"),
                                     ("seq", "<i4"), ("rtt_ns", "<i8")])
    t["round"] = np.repeat(np.arange(n_r), n_s * per)
    t["position"] = np.tile(np.repeat(np.arange(n_s), per), n_r)
    t["size_bytes"] = sizes[t["position"]]
    t["seq"] = np.tile(np.arange(per), n_r * n_s)
    t["rtt_ns"] = np.round(rtt_us.ravel() * 1000)
    return t


def test_lines_per_frame_count_recover_slope_and_intercept():
    sizes = np.arange(64, 4000, 64)
    frames = np.array([frames_per_message(int(s)) for s in sizes])
    # Hughes-Jones et al. figure 4.1: a step at each extra frame, and a smaller slope afterwards
    line = 60 + 0.0286 * sizes + 25 * (frames - 1) - 0.01 * (frames > 1) * (sizes - 1473)
    rng = np.random.default_rng(3)
    est = latency.estimate(_rounds_table(line[None, :, None] + rng.normal(0, 0.2, (6, sizes.size, 30)), sizes))
    fits = {f.frames: f for f in est.fits["minimum"]}
    assert set(fits) == {1, 2, 3} and est.rounds == 6 and est.order == "ascending"
    for k, slope in ((1, 0.0286), (2, 0.0186)):
        assert abs(fits[k].slope_us_per_byte - slope) <= fits[k].slope_ci95 < 0.001
        assert fits[k].explains and fits[k].slope_resolved
    one = fits[1]
    # the minimum of 30 round trips sits below the line by a fixed amount: the intercept, not the slope, carries it
    assert one.intercept_us < 60 and abs(one.intercept_us - 60) < 1


def test_too_few_sizes_give_no_line():
    est = latency.estimate(_rounds_table(np.full((3, 2, 5), 50.0), np.array([64, 128])))
    assert est.fits["minimum"] == [] and est.fit() is None
    assert "fewer than three" in latency.unresolved(None, est)


@pytest.mark.parametrize("intercept, coalesced", [(56, False), (62, False), (168, True), (230, True)])
def test_intercept_reads_as_the_seed_reads_it(intercept, coalesced):
    from nicrig.analysis.latency import interpret_intercept

    v = interpret_intercept(intercept, 3.0)
    assert v.coalescence_suspected is coalesced
    assert "coalescence" in v.text and f"{intercept}.0 ± 3.0 us" in v.text
    assert v.excess_over_per_frame_us == pytest.approx(intercept - 60)


def test_rtt_by_size_splits_the_singletons():
    from nicrig.analysis.latency import rtt_by_size

    table = np.array([(64, 1, 0, 10), (64, 1, 1, -1), (1500, 2, 0, 30)],
                     dtype=[("size_bytes", "<i4"), ("frames", "<i2"), ("seq", "<i4"), ("rtt_ns", "<i8")])
    got = rtt_by_size(table)
    assert list(got) == [64, 1500] and list(got[64]) == [10, -1]
