"""Seed 004's CPU model fit and seed 000's correlation table."""

from __future__ import annotations

import numpy as np
import pytest
from nicrig.analysis import cpu
from nicrig.errors import UsageError
from nicrig.udpmon.results import POINT_DTYPE


def _runs(rng: np.random.Generator, n: int) -> tuple[np.ndarray, ...]:
    """Runs as seed 004 made them: MTU 1500..6000, coalescence giving 1..40 packets per interrupt."""
    mb = rng.uniform(50, 1500, n)
    mtu = rng.choice([1500, 3000, 4500, 6000], n)
    kp = mb * 1e6 / mtu / 1000
    ki = kp / rng.uniform(1, 40, n)
    return mb, kp, ki


def test_fit_recovers_seed_004s_tcp_coefficients_within_their_intervals():
    rng = np.random.default_rng(4)
    hits = np.zeros(3)
    trials = 100
    for _ in range(trials):
        mb, kp, ki = _runs(rng, 30)
        t = 0.1 * mb + 0.4 * kp + 1.4 * ki + rng.normal(0, 5, mb.size)
        fit = cpu.fit_cpu_model(t, mb, kp, ki)
        hits += [abs(fit.alpha_per_mbyte - 0.1) <= fit.alpha_ci95, abs(fit.beta_per_kpacket - 0.4) <= fit.beta_ci95,
                 abs(fit.gamma_per_kinterrupt - 1.4) <= fit.gamma_ci95]
    assert (hits >= 0.9 * trials).all()  # 95% intervals cover the truth about 95% of the time
    assert fit.runs == 30 and fit.r_squared > 0.9 and fit.unit == "jiffies"
    assert fit.predicted.shape == fit.observed.shape == (30,)


def test_exact_data_give_the_coefficients_and_no_uncertainty():
    mb, kp, ki = _runs(np.random.default_rng(1), 8)
    fit = cpu.fit_cpu_model(0.1 * mb + 0.4 * kp + 1.4 * ki, mb, kp, ki)
    assert (fit.alpha_per_mbyte, fit.beta_per_kpacket, fit.gamma_per_kinterrupt) == pytest.approx((0.1, 0.4, 1.4))
    assert fit.alpha_ci95 == pytest.approx(0, abs=1e-9)


def test_per_megabyte_formula_of_seed_004():
    # T per MB = alpha + 1000/MTU beta + 1000/(MTU PPI) gamma
    assert cpu.cpu_per_mbyte(0.1, 0.4, 1.4, 1500, 10) == pytest.approx(0.1 + 0.4 * 1000 / 1500 + 1.4 * 1000 / 15000)


def test_bad_run_sets_are_refused_with_a_reason():
    mb = np.array([1.0, 2, 3, 4, 5])
    with pytest.raises(UsageError, match="at least 4"):
        cpu.fit_cpu_model(mb[:3], mb[:3], mb[:3], mb[:3])
    with pytest.raises(UsageError, match="independently"):
        cpu.fit_cpu_model(mb, mb, 2 * mb, 3 * mb)
    with pytest.raises(UsageError, match="one CPU time per run"):
        cpu.fit_cpu_model(mb[:4], mb, mb, mb)
    nan = np.array([np.nan] * 5)
    with pytest.raises(UsageError, match="0 usable"):
        cpu.fit_cpu_model(nan, mb, mb, mb)


def test_receiver_runs_from_points_and_counters():
    points = np.zeros(2, dtype=POINT_DTYPE)
    points["point"], points["size_bytes"], points["received"], points["remote_interrupts"] = [0, 1], 1000, 2000, \
        [500, -1]
    deltas = {0: {"cpu": {"total": {"jiffies": {"system": 3, "irq": 1, "softirq": 2, "user": 9, "idle": 50}}}},
              1: {"unavailable": "no /proc/stat"}}
    runs = cpu.receiver_runs(points, deltas)
    assert runs.kernel_jiffies[0] == 6 and np.isnan(runs.kernel_jiffies[1])
    assert list(runs.n_mbytes) == [2.0, 2.0] and list(runs.n_kpackets) == [2.0, 2.0]
    assert runs.n_kinterrupts[0] == 0.5 and np.isnan(runs.n_kinterrupts[1])


def test_correlation_is_pearsons_per_benchmark_and_application():
    rng = np.random.default_rng(0)
    web = rng.uniform(100, 200, 6)
    cols = {"udp_3way_max": 2 * web + 1, "udp_send_max": -web, "flat": np.full(6, 957.0), "noise": rng.normal(0, 1, 6),
            "app:web": web}
    c = cpu.correlation(cols, ["udp_3way_max", "udp_send_max", "flat", "noise"], ["app:web"])
    assert c.coefficients.shape == (4, 1) and c.items == 6
    assert c.coefficients[0, 0] == pytest.approx(1) and c.coefficients[1, 0] == pytest.approx(-1)
    assert np.isnan(c.coefficients[2, 0])  # no variation, no correlation
    assert c.coefficients[3, 0] == pytest.approx(np.corrcoef(cols["noise"], web)[0, 1])


def test_correlation_input_errors():
    cols = {"a": np.arange(5.0), "app:b": np.arange(5.0)}
    with pytest.raises(UsageError, match="no column"):
        cpu.correlation(cols, ["x"], ["app:b"])
    with pytest.raises(UsageError, match="at least one"):
        cpu.correlation(cols, [], ["app:b"])
    with pytest.raises(UsageError, match="at least 3"):
        cpu.correlation({"a": np.arange(2.0), "app:b": np.arange(2.0)}, ["a"], ["app:b"])
