"""What ``nicrig udpmon`` prints: every figure with its 95% half-width, rounded as the GUM states a measurement
(JCGM 100:2008 §7.2.6) and never finer than the 1 ns resolution of the time stamps."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
from test_latency_analysis import _rounds_table

from nicrig.analysis import latency
from nicrig.analysis.quantity import measured
from nicrig.udpmon.command import _latency_lines, _stream_lines, latency_summary

#: "value ± half-width" as the tables print it.
PAIR = re.compile(r"(-?[\d,]+(?:\.(\d+))?) ± ([\d,]+(?:\.(\d+))?)")


def _significant(text: str) -> int:
    return len(text.replace(",", "").replace(".", "").lstrip("0"))


def _table(rtt_us: np.ndarray, sizes: np.ndarray) -> list[str]:
    summary = latency_summary(latency.estimate(_rounds_table(rtt_us, sizes)))
    summary["readings"] = []
    return _latency_lines(summary)


def _size_rows(lines: list[str], sizes: np.ndarray) -> list[str]:
    return [line for line in lines if line.split() and line.split()[0] in {str(s) for s in sizes}]


@pytest.mark.parametrize("noise_us", [0.3, 0.0])
def test_latency_table_states_every_statistic_with_its_uncertainty(noise_us):
    sizes = np.array([64, 512, 1024, 1400])
    rng = np.random.default_rng(3)
    rtt = 138.85 + 0.01 * sizes[None, :, None] + rng.normal(0, noise_us, (10, 4, 400))
    lines = _table(rtt, sizes)
    rows = _size_rows(lines, sizes)
    assert len(rows) == 4
    for row in rows:
        pairs = PAIR.findall(row)
        # min, median, mean, p99, max, FWHM and the per-round value: each with its half-width
        assert len(pairs) == 7, row
        for value, places, half, half_places in pairs:
            assert len(places) == len(half_places), row  # the value to the half-width's decimal place
            assert len(places) <= 3, row  # never finer than 1 ns
            assert _significant(half) <= 2 and float(half.replace(",", "")) > 0, row
    if noise_us == 0:
        # a noiseless run keeps a finite interval: what the 1 ns clock resolves
        assert all(p[2] == "0.001" for row in rows for p in PAIR.findall(row) if p[0] != "0.000")
    assert any("1 ns resolution" in line for line in lines)


def test_too_few_round_trips_leave_the_p99_unbounded_and_say_so():
    sizes = np.array([64, 512, 1024])
    rtt = 60 + 0.01 * sizes[None, :, None] + np.random.default_rng(5).normal(0, 0.3, (2, 3, 10))
    lines = _table(rtt, sizes)
    assert all(len(PAIR.findall(row)) == 6 and " – " in row for row in _size_rows(lines, sizes))
    assert any(line.startswith("p99 –: too few round trips") for line in lines)


def test_a_half_width_is_never_printed_finer_than_the_resolution():
    assert measured(138.85100000000006, 0.0005657928670380859) == "138.85100 ± 0.00057"
    assert measured(138.85100000000006, 0.0005657928670380859, step=0.001) == "138.851 ± 0.001"
    assert measured(139.49912, 0.0184, step=0.001) == "139.499 ± 0.018"
    assert measured(52.3, 0.0085, step=0.015) == "52.30 ± 0.01"


def test_stream_rows_carry_the_rate_uncertainty_to_the_wire_rate():
    row = {"round": 0, "size_bytes": 1472, "spacing_us": 12.5, "sent": 10000, "received": 9990, "lost": 10,
           "out_of_order": 0, "duplicates": 0, "user_rate_mbps": 940.123456, "user_rate_ci95_mbps": 1.234,
           "wire_rate_mbps": 978.4567891, "local_cpu_busy_pct": 41.7, "remote_cpu_busy_pct": math.nan,
           "remote_interrupts": 812}
    line = _stream_lines([row])[1]
    assert " 12.5 " in line and "940.1 ± 1.2" in line
    assert f"978.5 ± {1.234 * 978.4567891 / 940.123456:.1f}" in line and " 42 " in line
