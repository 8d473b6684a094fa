"""``nicrig simulate`` over any profiles, seeds and sizes finishes its run and writes it; two seeds' reports
disagree only as often as their intervals say.

A simulation never loses its run to a statistic: hypothesis draws the
built-in profiles, seeds (negative and huge included), sizes and spacings,
and every run exits 0 with its results readable, as the run that once
died on a NaN of the FWHM bootstrap (every round trip of a noiseless host
on a few levels) does now. With the hosts' noise, each run's latency line
comes with 95% intervals from the spread of its rounds; runs that differ
only in their seed are independent repeats, so each interval covers the
runs' common value about 95% of the time and two of them overlap about
99% of the time.
"""

from __future__ import annotations

import io
import json
from contextlib import redirect_stdout
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from nicrig.acquisition.sim import application, profiles
from nicrig.acquisition.sim.model import Point, Rig, Scenario
from nicrig.cli import main
from nicrig.udpmon.results import measured_latency, open_results


def simulate(tmp: Path, *args: str) -> dict:
    out = tmp / "run.h5"
    out.unlink(missing_ok=True)
    buf = io.StringIO()
    with redirect_stdout(buf):
        code = main(["simulate", *args, "--capture-count", "1", "--workers", "1", "--json", "-o", str(out)])
    assert code == 0
    with open_results(out) as rf:
        assert rf.table_names()
    return json.loads(buf.getvalue())


@given(nic=st.sampled_from(profiles.available("nic")), bus=st.sampled_from(profiles.available("bus")),
       host=st.sampled_from(profiles.available("host")),
       seed=st.one_of(st.integers(0, 2**31), st.integers(2**62, 2**64 + 5)),
       sizes=st.lists(st.integers(16, 9000), min_size=1, max_size=3, unique=True),
       latency=st.booleans(), count=st.integers(1, 6), spacing=st.sampled_from(["0", "3.5", "12", "40"]))
@example(nic="alteon-acenic", bus="pci64-66", host="supermicro-370dle", seed=12, sizes=[64, 128, 896], latency=True,
         count=6, spacing="0")
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
def test_any_run_finishes_and_writes_its_results(tmp_path, nic, bus, host, seed, sizes, latency, count, spacing):
    summary = simulate(tmp_path, "--scenario", "latency" if latency else "stream", "--nic", nic, "--bus", bus,
                       "--host", host, "--seed", str(seed), "--order-seed", str(seed % 2**32),
                       "--sizes", ",".join(map(str, sizes)), "--count", str(count), "--spacing-us", spacing)
    assert summary["packets_sent"] >= count * len(sizes)


def test_the_reported_crash_runs_to_its_end(tmp_path):
    """The run that exited 1 without a file (a NaN from the FWHM bootstrap)."""
    summary = simulate(tmp_path, "--scenario", "latency", "--nic", "alteon-acenic", "--bus", "pci64-66", "--sizes",
                       "64:1472:64", "--count", "200", "--seed", "12", "--order-seed", "12")
    assert summary["packets_lost"] == 0 and summary["packets_sent"] == 2 * 23 * 200


@pytest.mark.parametrize("option", ["--seed", "--order-seed"])
def test_a_negative_seed_is_a_usage_error_and_writes_nothing(tmp_path, capsys, option):
    out = tmp_path / "run.h5"
    code = main(["simulate", "--count", "1", "--sizes", "64", option, "-3", "-o", str(out)])
    assert code == 2 and f"{option} -3" in capsys.readouterr().err and not out.exists()


SIZES = (64, 416, 768, 1120, 1472)
ROUNDS, PER_VISIT, SEEDS = 10, 3, 12


def line(seed: int) -> tuple[float, float, float, float]:
    """Slope, its 95% half-width, intercept, its half-width, of a latency run as the report's estimator fits it."""
    rng = np.random.default_rng(seed)
    points = tuple(Point(SIZES[i], PER_VISIT, round=r, position=p) for r in range(ROUNDS)
                   for p, i in enumerate(rng.permutation(len(SIZES))))
    scenario = Scenario(kind="latency", size_bytes=SIZES[0], count=PER_VISIT, seed=seed, schedule=points)
    run = Rig(scenario, profiles.load("bus", "pci64-66"), profiles.load("nic", "sk9843"),
              profiles.load("host", "supermicro-370dle")).run()
    fit = measured_latency(application.latency_visits(run, scenario), 1500, 10_000)[2].fit(frames=1)
    return fit.slope_us_per_byte, fit.slope_ci95, fit.intercept_us, fit.intercept_ci95


def test_two_seeds_intervals_overlap_as_their_confidence_says():
    runs = np.array([line(seed) for seed in range(1, SEEDS + 1)])
    for value, ci in ((0, 1), (2, 3)):
        v, h = runs[:, value], runs[:, ci]
        assert np.all(h > 0)
        # Each 95% interval covers the runs' common value (their mean) ...
        covered = np.mean(np.abs(v - v.mean()) <= h)
        assert covered >= 9 / SEEDS, (covered, v, h)
        # ... and two independent 95% intervals overlap ~99% of the time.
        pairs = [(a, b) for a in range(SEEDS) for b in range(a + 1, SEEDS)]
        overlap = np.mean([abs(v[a] - v[b]) <= h[a] + h[b] for a, b in pairs])
        assert overlap >= 0.9, (overlap, v, h)
        # ... yet no wider than the runs' own scatter calls for (a noiseless host gave 0 +- 0).
        assert np.median(h) < 4 * v.std(ddof=1) * 1.96
