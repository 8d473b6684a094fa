"""Latency arithmetic: fragmentation, statistics, histogram width, per-frame-count line fits."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from nicrig.analysis.latency import fit_latency, frames_per_message, fwhm, histogram, rtt_stats


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
    assert s.fwhm_us == 3.0  # bins 10, 11, 12 hold 1, 2, 1: all >= half of 2; the 30 us outlier is apart


def test_histogram_counts_every_value_once():
    edges, counts = histogram(np.array([5.2, 5.9, 6.0, 9.99]), bin_us=1.0)
    assert list(edges) == [5.0, 6.0, 7.0, 8.0, 9.0] and list(counts) == [2, 1, 0, 0, 1]
    assert fwhm(edges, counts) == 2.0  # the peak bin and its neighbour at half height


@given(st.lists(st.floats(0.5, 1e4), min_size=1, max_size=200), st.sampled_from([0.5, 1.0, 2.0]))
def test_histogram_conserves_counts(values, bin_us):
    edges, counts = histogram(np.array(values), bin_us)
    assert counts.sum() == len(values) and edges[0] <= min(values)


def test_fit_recovers_slope_and_intercept_per_frame_count():
    sizes = np.arange(64, 4000, 64)
    frames = np.array([frames_per_message(int(s)) for s in sizes])
    # seed 002 figure 4.1: a step at each extra frame, and a smaller slope afterwards
    rtt = 60 + 0.0286 * sizes + 25 * (frames - 1) - 0.01 * (frames > 1) * (sizes - 1473)
    fits = {f.frames: f for f in fit_latency(sizes, rtt)}
    assert set(fits) == {1, 2, 3}
    assert fits[1].slope_us_per_byte == pytest.approx(0.0286) and fits[1].intercept_us == pytest.approx(60)
    assert fits[2].slope_us_per_byte == pytest.approx(0.0186)
    assert fits[1].slope_ci95 == pytest.approx(0, abs=1e-9)


def test_fit_gives_confidence_intervals_that_cover_the_truth():
    rng = np.random.default_rng(3)
    sizes = np.repeat(np.arange(64, 1473, 32), 1)
    rtt = 56 + 0.023 * sizes + rng.normal(0, 0.5, sizes.size)
    (fit,) = fit_latency(sizes, rtt)
    assert abs(fit.slope_us_per_byte - 0.023) <= fit.slope_ci95
    assert abs(fit.intercept_us - 56) <= fit.intercept_ci95
    assert fit.points == sizes.size and fit.r > 0.99


def test_too_few_sizes_are_not_fitted():
    assert fit_latency(np.array([64, 128]), np.array([50.0, 52.0])) == []


def test_fit_rejects_outliers_and_recovers_the_line_within_its_interval():
    """Over many synthetic runs with three disturbed sizes each: the outliers are the sizes left out, and the
    95% intervals cover the true slope and intercept about 95% of the time; a fit keeping them strays further."""
    rng = np.random.default_rng(11)
    sizes = np.arange(64, 1473, 48)
    trials, covered, naive_worse, good_lost = 200, {"slope": 0, "intercept": 0}, 0, 0
    for _ in range(trials):
        rtt = 62 + 0.0286 * sizes + rng.normal(0, 0.4, sizes.size)
        bad = rng.choice(sizes.size, 3, replace=False)
        rtt[bad] += rng.choice([-1, 1], 3) * rng.uniform(20, 60, 3)  # other activity on the hosts
        (fit,) = fit_latency(sizes, rtt, reject_outliers=True)
        (naive,) = fit_latency(sizes, rtt)
        assert set(fit.rejected_sizes) >= {int(sizes[k]) for k in bad}
        assert fit.points == sizes.size - len(fit.rejected_sizes)
        good_lost += len(fit.rejected_sizes) - 3
        covered["slope"] += abs(fit.slope_us_per_byte - 0.0286) <= fit.slope_ci95
        covered["intercept"] += abs(fit.intercept_us - 62) <= fit.intercept_ci95
        naive_worse += abs(naive.intercept_us - 62) > abs(fit.intercept_us - 62)
    assert covered["slope"] >= 0.9 * trials and covered["intercept"] >= 0.9 * trials
    assert naive_worse > 0.8 * trials
    assert good_lost <= 0.01 * trials * (sizes.size - 3)  # a good size is rarely taken for an outlier


def test_clean_data_lose_no_points_to_outlier_rejection():
    sizes = np.arange(64, 1473, 64)
    (fit,) = fit_latency(sizes, 56 + 0.023 * sizes, reject_outliers=True)
    assert fit.rejected_sizes == () and fit.points == sizes.size


@given(st.lists(st.floats(1, 1e4, allow_nan=False), min_size=3, max_size=40))
def test_outlier_rejection_never_fails_on_any_rtts(values):
    sizes = np.arange(64, 64 + 8 * len(values), 8)
    for f in fit_latency(sizes, np.array(values), reject_outliers=True):
        assert f.points >= 3 and f.points + len(f.rejected_sizes) == len(values)


@pytest.mark.parametrize("intercept, coalesced", [(56, False), (62, False), (168, True), (230, True)])
def test_intercept_reads_as_the_seed_reads_it(intercept, coalesced):
    from nicrig.analysis.latency import interpret_intercept

    v = interpret_intercept(intercept, 3.0)
    assert v.coalescence_suspected is coalesced
    assert ("coalescence" in v.text) is True
    assert v.excess_over_per_frame_us == pytest.approx(intercept - 60)


def test_rtt_by_size_splits_the_singletons():
    from nicrig.analysis.latency import rtt_by_size

    table = np.array([(64, 1, 0, 10), (64, 1, 1, -1), (1500, 2, 0, 30)],
                     dtype=[("size_bytes", "<i4"), ("frames", "<i2"), ("seq", "<i4"), ("rtt_ns", "<i8")])
    got = rtt_by_size(table)
    assert list(got) == [64, 1500] and list(got[64]) == [10, -1]
