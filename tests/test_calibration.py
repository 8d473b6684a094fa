"""The simulated rig stays calibrated to Hughes-Jones et al. 2003, measured as a user measures a real rig.

A few representative rows of ``bench/calibration.py`` (the whole table takes
tens of minutes) through the same commands: ``nicrig simulate``, ``nicrig
decode`` and ``nicrig report --json``, every number read from the report:
the §4.1.3 trace of the SK-9843 (decoded buses), the IBM das's round trips
(the latency estimator, the hosts' noise), and a throughput row that a host
slower than calibrated must move out of its tolerance.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest
from nicrig.acquisition.sim import calibration, profiles

SMALL = calibration.Sizes(stream_count=300, spacings_us=(14.0, 17.0, 20.0), latency_sizes="64:1472:352",
                          latency_count=40, trace_count=4)


@pytest.fixture(scope="module")
def rows() -> list[calibration.Row]:
    return calibration.calibrate(SMALL, plan=(("sk-370dle-64", calibration._trace_sk),
                                              ("intel-das", calibration._latency)))


def test_the_trace_and_the_round_trips_are_within_their_tolerance(rows):
    assert {r.config for r in rows} == {"sk-370dle-64", "intel-das"}
    for r in rows:
        assert r.source.startswith("Hughes-Jones et al. 2003, §") and math.isfinite(r.measured), r
    bad = [f"{r.config}: {r.quantity} paper {r.seed} measured {r.measured:.4g} ({r.error:+.1%})"
           for r in rows if r.within > calibration.TOLERANCE]
    assert not bad, "\n".join(bad)


def test_the_round_trips_have_the_papers_width_and_an_interval(rows):
    """The hosts' noise gives the report's FWHM the paper's ~2 us (§3.1), and the line its 95% intervals."""
    width = next(r for r in rows if r.quantity.startswith("round-trip FWHM"))
    assert 1.5 < width.measured < 2.5
    line = [r for r in rows if r.quantity.startswith("request-response")]
    assert len(line) == 2 and all(0 < r.ci95 < 0.05 * abs(r.measured) for r in line)


def test_the_p4dp6_widths_are_measured_at_the_papers_sizes_on_a_run_of_their_own():
    """§6.2's histograms are of 64, 512, 1024 and 1400 bytes: their widths come from those sizes exactly, from a
    run long enough (``fwhm_count`` round trips a size) for a width known to a few per cent."""
    m = calibration._latency("intel-p4dp6", calibration.CONFIGS["intel-p4dp6"], calibration.Sizes())
    line, widths = (dict(zip(run.args[::2], run.args[1::2])) for run in m.runs)
    assert widths["--sizes"] == "64,512,1024,1400" and widths["--count"] == str(calibration.Sizes().fwhm_count)
    assert line["--sizes"] == calibration.Sizes().latency_sizes
    assert len(calibration._latency("intel-das", calibration.CONFIGS["intel-das"], SMALL).runs) == 1


def test_a_host_slower_than_calibrated_leaves_the_tolerance(tmp_path: Path):
    """The guard can fail: 30% more receive processing a frame on the 370DLE (a profile of one's own, by path)
    moves the SK-9843's best throughput out of its tolerance. Either way: below it where the application is
    served, or above it where the stack, going first, leaves the application only its first socketful, whose
    kernel stamps come at the wire's pace (a receive livelock, as a real one shows it)."""
    values = profiles.raw("host", "supermicro-370dle")
    values["rx_sw_us"] *= 1.3
    slow = tmp_path / "slow-370dle.toml"
    slow.write_text(profiles.to_toml(values), encoding="utf-8")
    cfg = replace(calibration.CONFIGS["sk-370dle-64"], host=str(slow))
    m = calibration._throughput("sk-370dle-64", cfg, SMALL)
    with calibration.tempfile.TemporaryDirectory() as tmp:
        reports = [calibration.Report(calibration.report_of(run, Path(tmp))) for run in m.runs]
    best = next(r for r in m.rows(reports) if r.quantity.startswith("max throughput"))
    assert best.within > calibration.TOLERANCE


@pytest.mark.parametrize("seed, high, measured, scale, error", [
    (17.0, None, 17.85, None, 0.05), (20.0, 21.0, 20.5, None, 0.0), (20.0, 21.0, 22.05, None, 0.05),
    (65.0, 100.0, 58.5, 100.0, -0.065), (0.0, None, 0.3, 100.0, 0.003), (1.0, None, math.nan, None, math.nan)])
def test_a_rows_error_counts_from_the_papers_value_its_range_or_its_whole(seed, high, measured, scale, error):
    r = calibration.Row("c", "q", "s", "u", seed, measured, seed_high=high, scale=scale)
    assert (math.isnan(r.error) and math.isnan(error)) or r.error == pytest.approx(error)


def test_a_row_beyond_the_limit_is_a_fault_unless_it_gives_the_papers_own_numbers():
    far = calibration.Row("c", "q", "s", "u", 10.0, 12.0)
    assert far.within == math.inf and not far.ok
    assert replace(far, note="The paper's 10 and its 12 disagree.").ok
    s = calibration.summary([far, calibration.Row("c", "q", "s", "u", 10.0, 10.2)])
    assert s == {"rows": 2, "within_5pct": 1, "within_10pct": 1, "beyond_explained": 0, "beyond_unexplained": 1}


def test_a_run_two_measurements_share_is_run_once_and_a_clash_of_names_is_refused(monkeypatch):
    """§4.1.3's per-node time reads the trace's run and the round trips' run that other rows read too: each is
    simulated once; two different runs under one name would give one of them the other's report."""
    ran: list[str] = []
    monkeypatch.setattr(calibration, "report_of", lambda run, folder: ran.append(run.name) or {"sections": []})
    shared, own = calibration.Run("k-shared", ("--count", "1")), calibration.Run("k-own", ("--count", "2"))

    def measuring(*runs: calibration.Run):
        def make(key, cfg, sizes):
            return calibration.Measurement(runs, lambda reports: [calibration.Row(key, f"{len(reports)} reports", "s",
                                                                                  "u", 1.0, 1.0)])
        return make
    rows = calibration.calibrate(SMALL, jobs=1, plan=(("sk-370dle-64", measuring(shared)),
                                                      ("sk-370dle-64", measuring(shared, own))))
    assert sorted(ran) == ["k-own", "k-shared"]
    assert [r.quantity for r in rows] == ["1 reports", "2 reports"]
    clash = calibration.Run("k-shared", ("--count", "3"))
    with pytest.raises(ValueError, match="k-shared"):
        calibration.calibrate(SMALL, plan=(("sk-370dle-64", measuring(shared)), ("sk-370dle-64", measuring(clash))))


def test_the_27_us_and_the_time_per_node_add_the_reports_times_as_the_paper_does():
    """§4.1.3: the send's CSR setup, its end to the fetch, the descriptor and first word to first word make the
    "some 27 us" to the receiving bus; the paper's own 56 us intercept and 36 us one way make its ~10 us a node."""
    bus = [{"quantity": q, "send_pci": v, "recv_pci": None} for q, v in (
        ("CSR setup end -> fetch, median", 2.5), ("fetch per frame (descriptor + data), median", 3.25),
        ("fetch per frame, its data alone, median", 3.0))]
    timeline = [{"frame": "median of 10 frames", "sender's CSR setup (us)": 1.25, "first word -> first word (us)": 23.0,
                 "sender's CSR -> receiver's service (us)": 36.0}]
    line = [{"fitted on": "median", "frames": 1, "intercept (us)": 56.0}]

    def report(*tables: tuple[str, list[dict]]) -> calibration.Report:
        return calibration.Report({"sections": [{
            "items": [{"label": "statistic the lines are fitted on", "value": "median"}],
            "tables": [{"title": t, "columns": list(rows[0]), "rows": [list(r.values()) for r in rows],
                        "raw_rows": [list(r.values()) for r in rows]} for t, rows in tables]}]})
    m = calibration._software_sk("sk-370dle-64", calibration.CONFIGS["sk-370dle-64"], SMALL)
    assert [r.name for r in m.runs] == ["sk-370dle-64-spaced", "sk-370dle-64-latency"]
    to_bus, per_node = m.rows([report(("Bus measurements", bus), ("Frames from send_pci", timeline)),
                               report(("RTT = intercept + slope x size", line))])
    assert to_bus.measured == pytest.approx(1.25 + 2.5 + 0.25 + 23.0) and to_bus.seed == 27.0
    assert per_node.measured == pytest.approx(10.0) and per_node.error == 0.0
