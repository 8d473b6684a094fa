"""The NTP-style clock offset estimate: its interval holds the true offset whatever the path's asymmetry."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from nicrig.udpmon.clocksync import estimate_offset


@settings(deadline=None, max_examples=200)
@given(offset=st.integers(-10**12, 10**12), seed=st.integers(0, 2**32 - 1), n=st.integers(1, 64))
def test_interval_holds_the_truth(offset: int, seed: int, n: int) -> None:
    rng = np.random.default_rng(seed)
    out = rng.exponential(50_000, n).astype(np.int64) + 1000  # request path, ns (asymmetric to the reply)
    back = rng.exponential(200_000, n).astype(np.int64) + 1000
    t1 = np.cumsum(rng.integers(10_000, 1_000_000, n)) + 10**9
    far = t1 + out - offset  # the far clock reads near - offset
    t4 = t1 + out + back
    est = estimate_offset(t1, far, t4)
    assert abs(est.offset_ns - offset) <= est.uncertainty_ns
    assert est.uncertainty_ns == pytest.approx((out + back).min() / 2)
    assert est.exchanges == n


def test_a_reply_before_its_request_is_refused() -> None:
    with pytest.raises(ValueError):
        estimate_offset(np.array([10]), np.array([5]), np.array([9]))
