"""udpmon's sequence accounting, spacing histograms and rates, against hand-worked and reference values."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from nicrig.udpmon.sequence import (
    MIN_WIRE_BYTES,
    HUGHES_JONES_2003_OVERHEAD_BYTES,
    WIRE_OVERHEAD_BYTES,
    rate_bps,
    sequence_stats,
    spacing_histogram,
    wire_rate_bps,
)


def _stats(seqs, sent):
    return sequence_stats(np.asarray(seqs, dtype=np.int64), sent)


def _eq(array, expected):
    assert array.dtype == np.int64
    assert array.tolist() == list(expected)


def _reference(seqs, sent):
    """RFC 4737 done the slow way, one packet at a time, as the RFC words it."""
    seen: set[int] = set()
    next_exp = 0
    firsts: list[int] = []
    dup = foreign = 0
    reordered_extents: list[int] = []
    for s in seqs:
        if not 0 <= s < sent:
            foreign += 1
            continue
        if s in seen:
            dup += 1
            continue
        seen.add(s)
        firsts.append(s)
        if s >= next_exp:
            next_exp = s + 1
        else:
            i = len(firsts) - 1
            j = next(k for k, x in enumerate(firsts) if x > s)
            reordered_extents.append(i - j)
    runs: list[int] = []
    run = 0
    for s in range(sent):
        if s in seen:
            if run:
                runs.append(run)
            run = 0
        else:
            run += 1
    if run:
        runs.append(run)
    return {"received": len(seen), "duplicates": dup, "foreign": foreign, "lost": sent - len(seen),
            "extents": reordered_extents, "runs": runs}


# --- hand-worked sequences ---------------------------------------------------------------

def test_in_order():
    st_ = _stats(range(10), 10)
    assert (st_.sent, st_.arrivals, st_.received, st_.lost, st_.duplicates, st_.foreign, st_.out_of_order) == \
        (10, 10, 10, 0, 0, 0, 0)
    _eq(st_.lost_runs, [])
    _eq(st_.lost_run_histogram, [0])
    assert st_.max_reorder_extent == 0 and st_.loss_fraction == 0.0


def test_single_loss():
    st_ = _stats([0, 1, 2, 4, 5], 6)
    assert (st_.received, st_.lost, st_.out_of_order) == (5, 1, 0)
    _eq(st_.lost_seqs, [3])
    _eq(st_.lost_run_starts, [3])
    _eq(st_.lost_runs, [1])
    _eq(st_.lost_run_histogram, [0, 1])


def test_loss_runs_including_first_and_last():
    dropped = {0, 1, 5, 6, 7, 10, 14, 15, 19}
    st_ = _stats([s for s in range(20) if s not in dropped], 20)
    assert st_.lost == 9 and st_.received == 11
    _eq(st_.lost_seqs, sorted(dropped))
    _eq(st_.lost_run_starts, [0, 5, 10, 14, 19])
    _eq(st_.lost_runs, [2, 3, 1, 2, 1])
    _eq(st_.lost_run_histogram, [0, 2, 2, 1])
    assert st_.loss_fraction == pytest.approx(9 / 20)


def test_reordered_pairs():
    st_ = _stats([0, 2, 1, 3, 5, 4], 6)
    assert (st_.received, st_.lost, st_.out_of_order) == (6, 0, 2)
    _eq(st_.reorder_extents, [1, 1])


def test_one_late_packet_is_the_only_reordered_one():
    st_ = _stats([1, 2, 3, 4, 0], 5)
    assert st_.out_of_order == 1
    _eq(st_.reorder_extents, [4])


def test_one_early_packet_makes_all_it_overtook_reordered():
    st_ = _stats([3, 0, 1, 2], 4)
    assert st_.out_of_order == 3
    _eq(st_.reorder_extents, [1, 2, 3])
    assert st_.max_reorder_extent == 3


def test_reordering_with_loss():
    st_ = _stats([0, 3, 1, 4], 5)  # 2 lost, 1 arrives after 3
    assert (st_.lost, st_.out_of_order) == (1, 1)
    _eq(st_.lost_seqs, [2])
    _eq(st_.reorder_extents, [1])


def test_duplicates():
    st_ = _stats([0, 1, 1, 2, 2, 2], 3)
    assert (st_.received, st_.duplicates, st_.lost, st_.out_of_order) == (3, 3, 0, 0)


def test_late_duplicate_is_not_reordered():
    st_ = _stats([0, 1, 2, 3, 1], 4)
    assert (st_.received, st_.duplicates, st_.out_of_order) == (4, 1, 0)


def test_duplicate_of_reordered_packet_counts_once():
    st_ = _stats([0, 2, 1, 1, 3], 4)
    assert (st_.duplicates, st_.out_of_order) == (1, 1)
    _eq(st_.reorder_extents, [1])


def test_empty_arrivals_all_lost():
    st_ = sequence_stats(np.array([], dtype=np.uint32), 5)
    assert (st_.arrivals, st_.received, st_.lost, st_.out_of_order) == (0, 0, 5, 0)
    _eq(st_.lost_runs, [5])
    _eq(st_.lost_run_histogram, [0, 0, 0, 0, 0, 1])
    assert st_.loss_fraction == 1.0


def test_empty_list_and_nothing_sent():
    st_ = sequence_stats([], 0)
    assert (st_.sent, st_.received, st_.lost, st_.foreign) == (0, 0, 0, 0)
    _eq(st_.lost_run_histogram, [0])
    assert st_.loss_fraction == 0.0


def test_seqs_beyond_sent_are_foreign_and_do_not_reorder():
    st_ = _stats([0, 1, 5, 2, 99], 3)
    assert (st_.arrivals, st_.received, st_.foreign, st_.lost, st_.out_of_order) == (5, 3, 2, 0, 0)


def test_only_foreign():
    st_ = _stats([7, 8, 9], 5)
    assert (st_.foreign, st_.received, st_.lost) == (3, 0, 5)


def test_wire_dtypes():
    st_ = sequence_stats(np.array([0, 0xFFFFFFFF, 2, 1], dtype=np.uint32), 3)
    assert (st_.foreign, st_.received, st_.out_of_order) == (1, 3, 1)
    st_ = sequence_stats(np.array([0, -1, 1], dtype=np.int32), 2)
    assert (st_.foreign, st_.received) == (1, 2)
    st_ = sequence_stats(np.array([0, 2**63 + 5, 1], dtype=np.uint64), 2)
    assert (st_.foreign, st_.received) == (1, 2)


def test_bad_input():
    with pytest.raises(TypeError):
        sequence_stats(np.array([0.0, 1.0]), 2)
    with pytest.raises(ValueError):
        sequence_stats(np.zeros((2, 2), dtype=int), 4)
    with pytest.raises(ValueError):
        sequence_stats([0], -1)


def test_to_dict_is_json():
    st_ = _stats([0, 2, 1, 4, 9], 5)
    d = json.loads(json.dumps(st_.to_dict(arrays=True)))
    assert d == {"sent": 5, "arrivals": 5, "received": 4, "duplicates": 0, "foreign": 1, "lost": 1,
                 "out_of_order": 1, "max_reorder_extent": 1, "lost_run_lengths": [1], "lost_run_counts": [1],
                 "reorder_extents": [1], "lost_seqs": [3], "lost_run_starts": [3], "lost_runs": [1]}
    assert "lost_seqs" not in st_.to_dict()


def test_sparse_run_counts_and_huge_sent():
    st_ = _stats([3, 4, 9], 12)  # runs 0-2, 5-8, 10-11
    lengths, counts = st_.lost_run_counts()
    _eq(lengths, [2, 3, 4])
    _eq(counts, [1, 1, 1])
    big = _stats([0, 5], 2**40)  # a bogus or huge count costs nothing until lost_seqs is asked for
    assert big.lost == 2**40 - 2
    _eq(big.lost_run_starts, [1, 6])
    _eq(big.lost_runs, [4, 2**40 - 6])
    assert big.to_dict()["lost_run_lengths"] == [4, 2**40 - 6]


# --- properties ----------------------------------------------------------------------------

seq_lists = st.lists(st.integers(min_value=-3, max_value=40), max_size=60)


@given(seq_lists, st.integers(min_value=0, max_value=40))
@settings(max_examples=300, deadline=None)
def test_matches_the_rfc_worded_reference(seqs, sent):
    st_ = _stats(seqs, sent)
    ref = _reference(seqs, sent)
    assert st_.received + st_.lost == sent
    assert st_.received + st_.duplicates + st_.foreign == st_.arrivals == len(seqs)
    assert (st_.received, st_.duplicates, st_.foreign, st_.lost) == \
        (ref["received"], ref["duplicates"], ref["foreign"], ref["lost"])
    _eq(st_.reorder_extents, ref["extents"])
    assert st_.out_of_order == len(ref["extents"])
    _eq(st_.lost_runs, ref["runs"])
    assert int((np.arange(st_.lost_run_histogram.size) * st_.lost_run_histogram).sum()) == st_.lost
    assert set(st_.lost_seqs.tolist()) == set(range(sent)) - set(seqs)


@given(st.permutations(list(range(30))))
def test_permuting_a_complete_set_loses_nothing(perm):
    st_ = _stats(perm, 30)
    assert (st_.lost, st_.duplicates, st_.foreign) == (0, 0, 0)
    records = sum(1 for i, s in enumerate(perm) if s == max(perm[: i + 1]))
    assert st_.out_of_order == 30 - records
    _eq(st_.lost_run_histogram, [0])


@given(st.integers(min_value=1, max_value=200).flatmap(
    lambda n: st.tuples(st.just(n), st.sets(st.integers(min_value=0, max_value=n - 1)))))
def test_dropping_k_distinct_loses_k(case):
    n, dropped = case
    st_ = _stats([s for s in range(n) if s not in dropped], n)
    assert st_.lost == len(dropped) and st_.out_of_order == 0
    _eq(st_.lost_seqs, sorted(dropped))
    assert int(st_.lost_runs.sum()) == len(dropped)
    # runs are maximal: a received number separates consecutive runs
    ends = st_.lost_run_starts + st_.lost_runs
    assert np.all(ends[:-1] < st_.lost_run_starts[1:])


@given(st.lists(st.integers(min_value=0, max_value=50), max_size=80))
def test_sorted_arrival_is_never_reordered(seqs):
    assert _stats(sorted(seqs), 51).out_of_order == 0


def test_large_stream_is_fast():
    rng = np.random.default_rng(2)
    n = 2_000_000
    seqs = np.arange(n, dtype=np.uint32)
    seqs = seqs[rng.random(n) > 0.01]
    swap = rng.choice(seqs.size - 1, 1000, replace=False)
    seqs[swap], seqs[swap + 1] = seqs[swap + 1], seqs[swap].copy()
    st_ = sequence_stats(seqs, n)
    assert st_.received + st_.lost == n
    assert 0 < st_.out_of_order <= 1000


# --- spacing histogram ---------------------------------------------------------------------

def test_spacing_histogram_auto_range():
    edges, counts = spacing_histogram(np.array([0, 1000, 2500, 2600, 10000]), bin_ns=1000)
    _eq(edges, range(0, 9000, 1000))
    _eq(counts, [1, 2, 0, 0, 0, 0, 0, 1])


def test_spacing_histogram_overflow_bin():
    t = np.array([0, 1000, 2500, 2600, 10000])
    edges, counts = spacing_histogram(t, bin_ns=1000, max_ns=2000)
    _eq(edges, [0, 1000, 2000, 7401])
    _eq(counts, [1, 2, 1])
    edges, counts = spacing_histogram(t, bin_ns=1000, max_ns=2500)  # rounded up to 3000
    _eq(edges, [0, 1000, 2000, 3000, 7401])
    _eq(counts, [1, 2, 0, 1])
    edges, counts = spacing_histogram(t, bin_ns=1000, max_ns=10_000)  # no overflow: no extra bin
    _eq(edges, range(0, 11_000, 1000))
    assert counts.sum() == 4 and counts[7] == 1


def test_spacing_at_the_limit_overflows():
    edges, counts = spacing_histogram([0, 2000], bin_ns=1000, max_ns=2000)
    _eq(edges, [0, 1000, 2000, 2001])
    _eq(counts, [0, 0, 1])


def test_spacing_histogram_short_and_bad():
    edges, counts = spacing_histogram([], bin_ns=500)
    _eq(edges, [0, 500])
    _eq(counts, [0])
    edges, counts = spacing_histogram([42], max_ns=3000)
    _eq(counts, [0, 0, 0])
    with pytest.raises(ValueError, match="backwards at index 2"):
        spacing_histogram([0, 10, 5])
    with pytest.raises(ValueError):
        spacing_histogram([0, 10], bin_ns=0)
    with pytest.raises(ValueError):
        spacing_histogram([0, 10], max_ns=0)


@given(st.lists(st.integers(min_value=0, max_value=10**6), min_size=2, max_size=50),
       st.integers(min_value=1, max_value=5000), st.one_of(st.none(), st.integers(min_value=1, max_value=10**5)))
def test_spacing_every_gap_in_its_bin(gaps, bin_ns, max_ns):
    t = np.concatenate(([0], np.cumsum(gaps)))
    edges, counts = spacing_histogram(t, bin_ns=bin_ns, max_ns=max_ns)
    assert counts.size == edges.size - 1 and counts.sum() == len(gaps)
    assert np.all(np.diff(edges) > 0)
    expected = np.bincount(np.searchsorted(edges, gaps, side="right") - 1, minlength=counts.size)
    _eq(counts, expected.tolist())


# --- rates ---------------------------------------------------------------------------------

def test_overheads():
    assert WIRE_OVERHEAD_BYTES == 66 and HUGHES_JONES_2003_OVERHEAD_BYTES == 60 and MIN_WIRE_BYTES == 84


def test_back_to_back_full_frames_fill_gigabit():
    # 1472-byte payloads make 1538 byte times each: 12304 ns per frame at 1 Gbit/s.
    assert wire_rate_bps(1472, 1000, 12_304_000) == pytest.approx(1e9)
    assert rate_bps(1472, 1000, 12_304_000, overhead_bytes=WIRE_OVERHEAD_BYTES) == pytest.approx(1e9)
    assert rate_bps(1472, 1000, 12_304_000) == pytest.approx(1472 * 8 / 12.304e-6)


def test_short_payloads_are_padded_on_the_wire():
    assert wire_rate_bps(18, 1, 672) == pytest.approx(1e9)  # exactly the 64-byte minimum frame
    assert wire_rate_bps(1, 1, 672) == pytest.approx(1e9)  # padded up to it
    assert wire_rate_bps(1, 1, 1000, min_wire_bytes=0) == pytest.approx(67 * 8 / 1e-6)


def test_rate_bps_seed002_and_errors():
    assert rate_bps(1000, 10, 1e6, overhead_bytes=HUGHES_JONES_2003_OVERHEAD_BYTES) == pytest.approx(
        1060 * 8 * 10 / 1e-3)
    assert rate_bps(1000, 0, 1e6) == 0.0
    with pytest.raises(ValueError):
        rate_bps(1000, 10, 0)
