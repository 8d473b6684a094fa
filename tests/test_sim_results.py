"""Simulated capture sets carry the applications' results in the udpmon layout.

``nicrig simulate`` takes ``nicrig udpmon``'s schedule options, and the set it
writes holds, beside the recorded sources, a ``results`` group laid out as a
results file: ``nicrig report`` on the capture set gives the latency slope and
intercept, or the throughput per size and spacing, as for a real run, marked
simulated. The round trips and arrival times are the model's application
events, checked here against the ground truth the model also writes.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from nicrig.acquisition.capture import CaptureSet
from nicrig.udpmon import schedule
from nicrig.udpmon.results import RESULTS_GROUP, ResultsFile, open_results

from nicrig.cli import main


def _nicrig(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nicrig", *argv], capture_output=True, text=True)


def _report(path: Path, tmp_path: Path) -> dict:
    out = tmp_path / f"{path.stem}.json"
    r = _nicrig("report", str(path), "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert "results only" in r.stderr  # not decoded: said, and the results reported all the same
    return json.loads(out.read_text())


def _table(section: dict, title: str) -> tuple[list[str], list[list]]:
    t = next(t for t in section["tables"] if t["title"].startswith(title))
    return t["columns"], t["raw_rows"]


@pytest.fixture(scope="module")
def latency_set(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("simres") / "lat.h5"
    r = _nicrig("simulate", "--scenario", "latency", "--nic", "sk9843", "--bus", "pci32-33",
                "--sizes", "64:1472:352", "--count", "12", "--rounds", "3", "--order-seed", "7",
                "--capture-count", "6", "-o", str(out))
    assert r.returncode == 0, r.stderr
    return out


def test_latency_results_are_the_applications_round_trips_in_udpmons_order(latency_set: Path) -> None:
    sizes = [64, 416, 768, 1120, 1472]
    with CaptureSet.open(latency_set) as cs:
        packets = cs.read_table("truth/packets")
        rf = cs.nested(ResultsFile, RESULTS_GROUP)
        assert rf.run_kind == "latency" and rf.simulation["nic"] == "sk9843"
        settings = json.loads(rf.attrs["settings"])
        rtt, visits = rf.read_table("latency/rtt"), rf.read_table("latency/visits")
    assert settings["sizes"] == sizes and settings["order_seed"] == 7 and settings["rounds"] == 3
    # the order nicrig udpmon latency would measure in with this seed: a fresh permutation per round
    plan = schedule.plan(len(sizes), 3, "random", np.random.default_rng(7))
    assert [(v["round"], v["position"], v["size_bytes"]) for v in visits] == \
        [(v.round, v.position, sizes[v.item]) for v in plan]
    assert len(rtt) == 12 * len(sizes) and (visits["requests"] == 4).all()
    # every round trip: the requester's send to its receipt of the response, as the model's ground truth has them
    req = packets[packets["kind"] == b"request"]
    resp = packets[packets["kind"] == b"response"]
    assert (req["seq"] == resp["seq"]).all()
    truth = np.rint((resp["t_app_recv_ps"] - req["t_app_send_ps"]) / 1000).astype(np.int64)
    assert (rtt["rtt_ns"] == truth).all()
    assert (resp["size_bytes"] == np.repeat(visits["size_bytes"], 4)).all()


def test_report_on_a_simulated_latency_set_gives_slope_and_intercept(latency_set: Path, tmp_path: Path) -> None:
    doc = _report(latency_set, tmp_path)
    section = doc["sections"][0]
    assert section["title"].startswith("Request-response latency") and "simulated rig" in section["simulated"]
    columns, rows = _table(section, "RTT = intercept + slope")
    fit = dict(zip(columns, next(r for r in rows if r[0] == "minimum")))
    # docs/simulator.md: ~0.031 us/byte on 32/33 (bus and wire both ways plus two copies), the SK-9843's intercept
    # near the paper's 62 us (Hughes-Jones et al. 2003, §4.1.1), within the spread of 36 round trips a size
    assert 0.029 < fit["slope (us/byte)"] < 0.033 and 58 < fit["intercept (us)"] < 66
    # a size the host's noise puts off the line may be flagged
    flagged = fit["suspect sizes left out"]
    assert fit["sizes"] + (0 if flagged == "none" else len(flagged.split(","))) == 5 and fit["rounds"] == 3


def test_the_recording_holds_the_first_exchanges_and_the_results_all(latency_set: Path) -> None:
    with CaptureSet.open(latency_set) as cs:
        frames = cs.read_table("truth/probe/frames")
        pci = cs.read_table("truth/send_pci/transactions")
        until = json.loads(cs.nested(ResultsFile, RESULTS_GROUP).attrs["simulation"])["timeline"]
        source = cs.source("send_pci")
        last_sample_ns = int(source.times_ps(source.num_samples - 1)[0]) / 1000  # on the common timeline
    # --capture-count 6: six requests and their responses (one frame each), nothing of the seventh
    assert sorted(frames["seq"].tolist()) == sorted(list(range(6)) * 2)
    assert pci["t_end_ps"].max() / 1000 < last_sample_ns
    assert until["recorded_until_ns"] - until["trigger_ns"] == pytest.approx(last_sample_ns, abs=100)
    assert main(["decode", str(latency_set)]) == 0
    with CaptureSet.open(latency_set) as cs:
        # no transaction cut in two where the analyzer stopped: the decoders find every one the truth has
        assert len(cs.read_table("decoded/send_pci/pci")) == len(pci)
        assert len(cs.read_table("decoded/probe/ethernet")) == len(frames)


def test_report_on_a_simulated_stream_set_gives_throughput(tmp_path: Path) -> None:
    out = tmp_path / "st.h5"
    r = _nicrig("simulate", "--scenario", "stream", "--nic", "sk9843", "--bus", "pci64-66",
                "--sizes", "1472", "--spacing-us", "0,20", "--count", "40", "--rounds", "2", "-o", str(out))
    assert r.returncode == 0, r.stderr
    with open_results(out) as rf:
        points = rf.read_table("stream/points")
        assert rf.simulation is not None and rf.run_kind == "stream"
    assert len(points) == 4
    # 20 us apart the receiver (an interrupt per frame) keeps pace; back to back it is the slower: what it loses it
    # loses at its socket, and counts (UDP RcvbufErrors)
    paced, flat_out = points[points["spacing_us"] == 20.0], points[points["spacing_us"] == 0.0]
    assert (paced["received"] == 40).all() and (paced["kernel_drops"] == 0).all()
    assert (flat_out["lost"] > 0).all() and (flat_out["kernel_drops"] == flat_out["lost"]).all()
    doc = _report(out, tmp_path)
    section = doc["sections"][0]
    assert section["title"].startswith("Throughput against transmit spacing") and section["simulated"]
    columns, rows = _table(section, "Every size and spacing")
    by_spacing = {r[columns.index("spacing (us)")]: dict(zip(columns, r)) for r in rows}
    # 20 us apart: 1472 x 8 bits every 20 us; back to back: what the receiver took, never above the line
    assert by_spacing[20.0]["user (Mbit/s)"] == pytest.approx(1472 * 8 / 20, rel=0.01)
    assert 0 < by_spacing[0.0]["user (Mbit/s)"] <= 957.1 and by_spacing[0.0]["lost"] > 0


def test_bad_schedule_options_are_one_clear_line(tmp_path: Path) -> None:
    for argv, message in ((["--sizes", "8"], "16 to 65507"), (["--spacing-us", "5:1:1"], "stop >= start"),
                          (["--rounds", "0"], "--rounds"), (["--capture-count", "-1"], "--capture-count")):
        r = _nicrig("simulate", *argv, "-o", str(tmp_path / "x.h5"))
        assert r.returncode == 2 and r.stderr.count("\n") == 1 and message in r.stderr, (argv, r.stderr)
    assert list(tmp_path.iterdir()) == []
