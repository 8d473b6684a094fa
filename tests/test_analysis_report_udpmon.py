"""``nicrig report`` on udpmon results: suites, aggregates and swept runs between namespace hosts.

The files are real: daemons in network namespaces (three hosts on a bridge,
or loopback where namespaces cannot be made), a short seed-000 suite, an
aggregate, and interrupt-coalescing and MTU sweeps (coalescing through the
stand-in ethtool of ``test_udpmon_sweep``, since veth has none). Every number
the report shows is recomputed here from the file and table it names.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import numpy.lib.recfunctions as rfn
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from netns import netns_hosts
from nicrig.analysis import command, cpu, figures, load, suite
from nicrig.udpmon import flows as F
from nicrig.udpmon import suite as S
from nicrig.udpmon.results import LOAD_DTYPE, ResultsFile
from nicrig.udpmon.sweep import curves as udpmon_curves
from test_udpmon_suite import SECRET, serve
from test_udpmon_sweep import install_fake_ethtool

SUITE_TESTS = "udp-send-1472,udp-recv-1472,udp-3way-18,tcp-send,tcp-accept"


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path | str]:
    """Unswept suite and aggregate files always; swept ones when the hosts are namespaces (else ``why``)."""
    folder = tmp_path_factory.mktemp("udpmon-report")
    env = install_fake_ethtool(folder) or dict(os.environ)
    secret = folder / "secret"
    secret.write_text(SECRET + "\n")
    secret.chmod(0o600)
    out: dict[str, Path | str] = {}

    with netns_hosts(3) as hosts:
        a = hosts.a

        def udpmon(*args: str) -> None:
            r = a.run([sys.executable, "-m", "nicrig", "udpmon", *args, "--secret-file", str(secret)],
                      timeout=300, env=env)
            assert r.returncode == 0, r.stderr

        tuning = ("--allow-tuning",) if hosts.isolated else ()
        b = f"{hosts.b.address}:{serve(hosts.b, secret, *tuning, env=env)}"
        c = f"{hosts.c.address}:{serve(hosts.c, secret, *tuning, env=env)}"
        for name in ("suite", "agg", "lat-ic", "bw-ic", "suite-mtu", "agg-mtu"):
            out[name] = folder / f"{name}.h5"
        udpmon("suite", "--peer", b, "--third", c, "--tests", SUITE_TESTS, "--trial-s", "0.1", "--max-trials", "2",
               "--connections", "1,2", "--link-mbps", "1000", "-o", str(out["suite"]))
        udpmon("aggregate", b, c, "--direction", "in", "--size", "1000", "--spacing-us", "50", "--count", "500",
               "-o", str(out["agg"]))
        if not hosts.isolated or "FAKE_ETHTOOL_STATE" not in env:
            out["why"] = hosts.fallback_reason or "ethtool is not installed"
            return out
        udpmon("latency", b, "--sweep", "rx-usecs=0,20,40", "--sizes", "64:1400:192", "--count", "20",
               "-o", str(out["lat-ic"]))
        udpmon("stream", b, "--sweep", "rx-usecs=0,20,40", "--sizes", "1000", "--spacing-us", "10,20,40",
               "--count", "300", "--idle-timeout-ms", "100", "-o", str(out["bw-ic"]))
        udpmon("suite", "--peer", b, "--sweep", "mtu=1500,9000", "--tests", "udp-send-1472,udp-recv-1472,tcp-send",
               "--connections", "1", "--trial-s", "0.1", "--max-trials", "2", "--link-mbps", "1000",
               "-o", str(out["suite-mtu"]))
        udpmon("aggregate", b, c, "--sweep", "remote:mtu=1500,9000", "--direction", "in", "--size", "1000",
               "--spacing-us", "50", "--count", "300", "-o", str(out["agg-mtu"]))
    return out


@pytest.fixture
def swept(files) -> dict[str, Path | str]:
    if "why" in files:
        pytest.skip(reason=f"sweeps change interfaces: network namespaces only ({files['why']})")
    return files


def nicrig(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    r = subprocess.run([sys.executable, "-m", "nicrig", *map(str, args)], capture_output=True, text=True, timeout=300)
    if check:
        assert r.returncode == 0, r.stderr
    return r


def report_of(*paths: Path | str, **options: object) -> dict:
    """The report (as its JSON) built in this process, with the command's own defaults."""
    p = argparse.ArgumentParser()
    command.add_arguments(p)
    args = p.parse_args([str(x) for x in paths])
    for k, v in options.items():
        setattr(args, k, v)
    from nicrig.analysis import render

    rep, failed = command.build(args)
    assert failed == 0, rep.problems
    return json.loads(render.to_json(rep))


@pytest.fixture(scope="module")
def everything(files) -> dict:
    present = [files[k] for k in ("suite", "agg", "lat-ic", "bw-ic", "suite-mtu", "agg-mtu") if Path(files[k]).exists()]
    return report_of(*present)


def section(rep: dict, start: str, file: str | None = None) -> dict:
    return next(s for s in rep["sections"] if s["title"].startswith(start) and (file is None or s["file"] == file))


def table(sec: dict, title: str) -> dict:
    return next(t for t in sec["tables"] if t["title"].startswith(title))


def rows(t: dict) -> list[dict]:
    return [dict(zip(t["columns"], r)) for r in t["raw_rows"]]


def approx(v: float | None, ref: float) -> bool:
    return (v is None and not math.isfinite(ref)) or (v is not None and v == pytest.approx(ref, rel=1e-9))


# ----------------------------------------------------------------------------- suite and aggregate


def test_suite_table_is_pai_rixner_and_kims_figures_5_to_11(files, everything) -> None:
    sec = section(everything, "NIC microbenchmarks (Pai, Rixner and Kim 2004)", "suite.h5")
    t = table(sec, "Throughput per test against the theoretical maximum")
    assert "suite/flows" in t["source"] and "suite.h5" in t["source"]
    with ResultsFile.open(files["suite"]) as rf:
        tests, trials, flows = (rf.read_table(f"suite/{x}") for x in ("tests", "trials", "flows"))
        link = float(rf.table_attrs("suite/tests")["link_mbps"])
    got = rows(t)
    assert [r["test"] for r in got] == [S.TESTS[n - 1].title for n in (1, 2, 6, 7, 9)]
    for r, stored in zip(got, tests):
        test = next(x for x in S.TESTS if x.title == r["test"])
        assert r["theoretical maximum"] == pytest.approx(S.theoretical(test, link, 1500))
        assert r["throughput"] == pytest.approx(stored["throughput"])
        assert r["% of theoretical"] == pytest.approx(100 * stored["throughput"] / r["theoretical maximum"])
        # the best trial again, straight from its flows' raw counts and times
        best = flows[flows["point"] == stored["best_point"]]
        rates = [F.flow_rates(f["protocol"].decode(), int(f["size_bytes"]), int(f["received"]), int(f["bytes"]),
                              int(f["first_ns"]), int(f["last_ns"])) for f in best]
        total = sum(p for p, _ in rates) / 1000 if test.unit == "conn/ms" else sum(m for _, m in rates)
        assert r["throughput"] == pytest.approx(total)
        assert r["lost at best trial"] == int(best["lost"].sum()) and r["sent at best trial"] == int(best["sent"].sum())
        assert approx(r["loss at best trial (%)"], 100 * best["lost"].sum() / best["sent"].sum())
        trial = trials[trials["point"] == stored["best_point"]][0]
        assert approx(r["best loss-free offered load"], trial["offered"] if stored["lossless"] else math.nan)
        assert r["trials"] == stored["trials"] and r["size (bytes)"] == test.size_bytes
        if "search stopped" in r["limited by"]:  # stored whole, not cut at the column's width
            assert re.search(r"search stopped after \d+ trials$", r["limited by"])
    assert [f["title"] for f in sec["figures"]] == ["Throughput per test, % of the theoretical maximum"]
    # the 3-way test ran: the third host sent while this one sent to the peer
    assert next(r for r in got if r["#"] == 6)["trials"] >= 1


def test_aggregate_flows_and_total(files, everything) -> None:
    sec = section(everything, "Aggregate throughput", "agg.h5")
    with ResultsFile.open(files["agg"]) as rf:
        flows, total = rf.read_table("aggregate/flows"), rf.read_table("aggregate/total")[0]
        hosts = {h["host"].decode(): h["address"].decode() for h in rf.read_table("hosts")}
    got = rows(table(sec, "Flows and their total"))
    assert [r["host"] for r in got] == ["r1", "r2", "total (sum)"]
    for r, f in zip(got, flows):
        assert r["address"] == hosts[r["host"]] and r["received"] == f["received"]
        assert r["Mbit/s"] == pytest.approx(f["rate_mbps"])
    assert got[-1]["Mbit/s"] == pytest.approx(total["sum_rate_mbps"]) and got[-1]["received"] == total["received"]
    items = {i["label"]: i["raw"]["value"] for i in sec["items"]}
    assert items["total over the flows' common span"] == pytest.approx(total["span_rate_mbps"])
    assert sec["figures"] and sec["interpretation"]


def test_one_suite_leaves_the_correlation_undetermined_and_says_so(files) -> None:
    rep = report_of(files["suite"])
    sec = section(rep, "Microbenchmarks across runs")
    assert any(t.startswith("Correlation undetermined: 1 run(s)") for t in sec["interpretation"])
    assert [t["title"] for t in sec["tables"]] == ["Throughput per run and test"]


# ----------------------------------------------------------------------------- sweeps


def test_latency_sweep_is_seed_002_figure_8_1(swept, everything, monkeypatch) -> None:
    sec = section(everything, "Sweep of rx-usecs (latency)", "lat-ic.h5")
    assert [f["title"] for f in sec["figures"]] == ["Mean RTT against response size per setting (as Hughes-Jones "
                                                    "et al. 2003, figure 8.1)"]
    with ResultsFile.open(swept["lat-ic"]) as rf:
        steps = rf.read_table("sweep/steps")
        stored = rf.read_table("sweep/latency")
        rtt = {k: rf.read_table(f"sweep/step{k}/latency/rtt") for k in steps["step"]}
    t = table(sec, "RTT per response size and step")
    assert "sweep/step2/latency/rtt" in t["source"]
    got = rows(t)
    assert len(got) == len(stored) == 3 * 7
    label = {int(s["step"]): s["label"].decode() for s in steps}
    for r, s in zip(got, stored):
        assert r["step"] == label[int(s["step"])] and r["size (bytes)"] == s["size_bytes"]
        mine = rtt[int(s["step"])]
        ok = mine["rtt_ns"][(mine["size_bytes"] == s["size_bytes"]) & (mine["rtt_ns"] >= 0)] / 1000
        assert r["mean (us)"] == pytest.approx(ok.mean()) == pytest.approx(s["mean_us"])
        assert r["min (us)"] == pytest.approx(s["min_us"])
    fits = rows(table(sec, "RTT = intercept + slope x size, per step"))
    assert {r["step"] for r in fits} == {"rx-usecs=0", "rx-usecs=20", "rx-usecs=40"}
    base = next(r["intercept (us)"] for r in fits if (r["step"], r["fitted on"]) == ("rx-usecs=0", "mean"))
    for r in fits:
        if r["fitted on"] == "mean":
            assert r["intercept - rx-usecs=0's (us)"] == pytest.approx(r["intercept (us)"] - base)
    assert {(r["step"], r["host"], r["value"]) for r in rows(table(sec, "Settings in force per step"))} >= {
        ("rx-usecs=20", "local", "20"), ("rx-usecs=20", "remote", "20")}
    # the legend: one curve per step, named by the swept setting and its value, as udpmon's curves() cuts them
    seen = {}
    drawn = figures.rtt_per_setting
    monkeypatch.setattr(figures, "rtt_per_setting", lambda c, i: seen.update(c) or drawn(c, i))
    report_of(swept["lat-ic"])
    assert list(seen) == ["rx-usecs=0", "rx-usecs=20", "rx-usecs=40"]
    for name, (x, y) in udpmon_curves(steps, stored, "size_bytes", "mean_us").items():
        assert np.array_equal(seen[name][0], x) and np.allclose(seen[name][1], y)


def test_stream_sweep_is_seed_002_figure_8_2(swept, everything, monkeypatch) -> None:
    sec = section(everything, "Sweep of rx-usecs (stream)", "bw-ic.h5")
    assert sec["figures"][0]["title"].startswith("Throughput against transmit spacing per setting")
    with ResultsFile.open(swept["bw-ic"]) as rf:
        steps = rf.read_table("sweep/steps")
        stored = rf.read_table("sweep/stream")
        points = {k: rf.read_table(f"sweep/step{k}/stream/points") for k in range(3)}
    got = rows(table(sec, "Every size and spacing per step"))
    assert [(r["step"], r["spacing (us)"]) for r in got] == [(f"rx-usecs={v}", s) for v in (0, 20, 40)
                                                             for s in (10.0, 20.0, 40.0)]
    for r in got:
        k = int(r["step"].split("=")[1]) // 20
        mine = stored[(stored["step"] == k) & (stored["spacing_us"] == r["spacing (us)"])]
        assert r["rounds"] == len(mine) == 3 and r["lost"] == mine["lost"].sum()
        # udpmon and the report ran the one rate estimator over the same datagrams, with the same link
        assert r["user (Mbit/s)"] == pytest.approx(np.nanmean(mine["user_rate_mbps"]))
        p = points[k]
        assert np.array_equal(np.sort(p["user_rate_mbps"][p["spacing_us"] == r["spacing (us)"]]),
                              np.sort(mine["user_rate_mbps"]), equal_nan=True)
    step = {s["label"].decode(): s["step"] for s in steps}
    for r in rows(table(sec, "Best throughput per step and size")):
        mine = [x for x in got if x["step"] == r["step"]]
        assert r["best user rate (Mbit/s)"] == pytest.approx(max(x["user (Mbit/s)"] for x in mine))
        assert step[r["step"]] in (0, 1, 2)
    load_rows = rows(table(sec, "Host load per step"))
    assert {(r["step"], r["host"]) for r in load_rows} == {(f"rx-usecs={v}", h) for v in (0, 20, 40)
                                                           for h in ("local", "remote")}
    seen = []
    drawn = figures.throughput_vs_spacing
    monkeypatch.setattr(figures, "throughput_vs_spacing",
                        lambda c, labels=None: seen.extend(labels) or drawn(c, labels))
    report_of(swept["bw-ic"])
    assert seen == ["rx-usecs=0", "rx-usecs=20", "rx-usecs=40"]


def test_suite_sweep_and_seed_000_table_2(swept, everything) -> None:
    sec = section(everything, "Sweep of mtu (suite)", "suite-mtu.h5")
    with ResultsFile.open(swept["suite-mtu"]) as rf:
        stored = rf.read_table("sweep/suite")
    got = rows(table(sec, "Throughput per step and test"))
    assert [(r["step"], r["MTU"]) for r in got] == [("mtu=1500", 1500)] * 3 + [("mtu=9000", 9000)] * 3
    for r, s in zip(got, stored):
        assert r["throughput"] == pytest.approx(s["throughput"])
        assert r["theoretical maximum"] == pytest.approx(s["theoretical"])
    corr = section(everything, "Microbenchmarks across runs")
    items = rows(table(corr, "Throughput per run and test"))
    assert [r["run"] for r in items] == ["suite.h5", "suite-mtu.h5 mtu=1500", "suite-mtu.h5 mtu=9000"]
    steps = S.throughput_columns(stored)  # udpmon's own hook over the sweep's steps
    names = ["udp-send-1472", "udp-recv-1472", "tcp-send"]
    for n in names:
        assert [r[n] for r in items[1:]] == pytest.approx(list(steps[n]))
    matrix = rows(table(corr, "Correlation coefficients between the tests"))
    data = np.array([[r[n] for r in items] for n in names])
    expected = np.corrcoef(data)
    for k, r in enumerate(matrix):
        assert r["test"] == names[k]
        for j, n in enumerate(names):
            assert approx(r[n], expected[k, j])
    assert any("not measured in every run" in t for t in corr["interpretation"])


def test_aggregate_sweep_has_a_bar_per_step(swept, everything) -> None:
    sec = section(everything, "Sweep of mtu (aggregate)", "agg-mtu.h5")
    with ResultsFile.open(swept["agg-mtu"]) as rf:
        stored = rf.read_table("sweep/aggregate")
    got = rows(table(sec, "Flows and their total per step"))
    totals = [r for r in got if r["host"] == "total (sum)"]
    assert [r["step"] for r in totals] == ["mtu=1500", "mtu=9000"]
    assert [r["Mbit/s"] for r in totals] == pytest.approx(list(stored["sum_rate_mbps"]))
    assert sec["figures"][0]["title"] == "Throughput per flow and in total, per setting"


# ----------------------------------------------------------------------------- the CPU model


def test_cpu_model_is_fitted_per_host_from_the_load_tables(files, everything) -> None:
    sec = section(everything, "CPU model (Geist et al. n.d.)")
    t = table(sec, "T = alpha N_MB + beta N_KP + gamma N_KI per host")
    sources = dict(part.split(": ", 1) for part in t["source"].rsplit(" (kernel_jiffies", 1)[0].split(" | "))
    for r in rows(t):
        # recompute from exactly the tables the source names for this host
        label = r["host"].split(" (")[0]
        parts = []
        for chunk in sources[r["host"]].split("; "):
            name, tables = chunk.split(": ", 1)
            with ResultsFile.open(files[name.removesuffix(".h5")]) as rf:
                for path in tables.split(", "):
                    mine = rf.read_table(path)
                    parts.append(mine[mine["host"] == label.encode()])
        rows_ = np.concatenate(parts)
        usable = np.isfinite(np.column_stack([rows_[c] for c in load.MODEL_COLUMNS])).all(axis=1)
        if r["status"].startswith("not fitted"):
            assert r["alpha, per MB (jiffies)"] is None
            with pytest.raises(Exception, match="CPU model"):
                cpu.fit_cpu_model(*(rows_[c] for c in load.MODEL_COLUMNS))
            continue
        fit = cpu.fit_cpu_model(*(rows_[c] for c in load.MODEL_COLUMNS))
        assert r["points"] == fit.runs == usable.sum()
        assert r["alpha, per MB (jiffies)"] == pytest.approx(fit.alpha_per_mbyte)
        assert r["gamma, per 1000 interrupts (jiffies)"] == pytest.approx(fit.gamma_per_kinterrupt)
        loose = [n for n, v, ci in (("alpha", fit.alpha_per_mbyte, fit.alpha_ci95),
                                    ("beta", fit.beta_per_kpacket, fit.beta_ci95),
                                    ("gamma", fit.gamma_per_kinterrupt, fit.gamma_ci95)) if abs(v) <= ci]
        assert (r["status"] == "fitted") == (not loose)
        assert all(n in r["status"] for n in loose)
    # an aggregate is one point per daemon: too few to fit, and the report says why
    r1 = next(r for r in rows(t) if r["host"].startswith("r1 "))
    assert r1["status"].startswith("not fitted") and "at least 4" in r1["status"]


# ----------------------------------------------------------------------------- formats, pages, bad input


def test_csv_and_json_carry_the_same_numbers(files) -> None:
    rep = report_of(files["suite"], files["agg"])
    text = nicrig("report", files["suite"], files["agg"], "--format", "csv").stdout
    cells = list(csv.DictReader(io.StringIO(text)))
    assert all(c["source"] for c in cells)
    for sec in rep["sections"]:
        for t in sec["tables"]:
            assert len(set(t["columns"])) == len(t["columns"]), t["title"]  # a CSV cell is named by its column
            mine = [c for c in cells if c["section"] == sec["title"] and c["table"] == t["title"]]
            assert len(mine) == len(t["raw_rows"]) * len(t["columns"])
            for c in mine:
                v = t["raw_rows"][int(c["row"])][t["columns"].index(c["column"])]
                assert c["value"] == ("" if v is None else str(v)) and c["source"] == t["source"]
    suite_cells = [c for c in cells if c["table"].startswith("Throughput per test")]
    assert suite_cells and all("suite.h5: suite/tests" in c["source"] for c in suite_cells)


def test_html_page_has_the_new_sections(swept, tmp_path) -> None:
    out = tmp_path / "r.html"
    nicrig("report", swept["suite"], swept["lat-ic"], swept["bw-ic"], "-o", out)
    page = out.read_text()
    assert len(re.findall(r'src="data:image/png;base64,', page)) >= 4  # bars, 8.1, 8.2, CPU model
    for heading in ("NIC microbenchmarks (Pai, Rixner and Kim 2004)", "Sweep of rx-usecs (latency)",
                    "Sweep of rx-usecs (stream)", "CPU model (Geist et al. n.d.)", "Microbenchmarks across runs"):
        assert heading in page


def _copy_with(src: Path, dst: Path, change) -> Path:
    shutil.copy(src, dst)
    with h5py.File(dst, "r+") as f:
        change(f)
    return dst


def test_damaged_files_are_named_and_the_rest_reported(files, tmp_path) -> None:
    odd = _copy_with(files["suite"], tmp_path / "odd.h5", lambda f: f.attrs.modify("kind", "bogus"))
    noflows = _copy_with(files["suite"], tmp_path / "noflows.h5", lambda f: f["suite"].pop("flows"))
    unknown = tmp_path / "unknown.h5"

    def rename(f: h5py.File) -> None:
        t = f["suite/tests"][()]
        t["test"][0] = b"udp-send-9000"
        del f["suite/tests"]
        f["suite"].create_dataset("tests", data=t)
        f["suite/tests"].attrs.update({"link_mbps": 1000.0, "mtu": 1500})

    _copy_with(files["suite"], unknown, rename)

    def shorten(f: h5py.File) -> None:
        t = f["load"][()]
        del f["load"]
        f.create_dataset("load", data=rfn.drop_fields(t, "kilo_interrupts"))

    short = _copy_with(files["suite"], tmp_path / "short.h5", shorten)
    r = nicrig("report", files["agg"], odd, noflows, unknown, short, "--format", "json", check=False)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    rep = json.loads(r.stdout)
    assert len(rep["problems"]) == 4
    assert any("short.h5" in p and "load table lacks kilo_interrupts" in p for p in rep["problems"])
    assert any("odd.h5" in p and "unknown kind 'bogus'" in p for p in rep["problems"])
    assert any("noflows.h5" in p and "suite/flows" in p for p in rep["problems"])
    assert any("unknown.h5" in p and "unknown test 'udp-send-9000'" in p for p in rep["problems"])
    assert [i["path"] for i in rep["inputs"]] == [str(files["agg"])]
    # a problem file's load rows never reach the CPU model
    cpu_sec = section(rep, "CPU model (Geist et al. n.d.)")
    assert cpu_sec["file"] == "agg.h5"


def test_a_swept_file_missing_a_step_is_refused_by_name(swept, tmp_path) -> None:
    bad = _copy_with(swept["bw-ic"], tmp_path / "gap.h5", lambda f: f["sweep/step1"].pop("stream"))
    r = nicrig("report", bad, check=False)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "gap.h5" in r.stderr and "sweep/step1/stream/points" in r.stderr


# ----------------------------------------------------------------------------- the pure parts, any input


def _maybe(lo: float, hi: float) -> st.SearchStrategy[float]:
    return st.one_of(st.floats(lo, hi), st.just(math.nan))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(_maybe(0, 5), _maybe(-1, 1e3), _maybe(-1, 1e3), _maybe(-1, 1e3), _maybe(-1, 1e3),
                          st.integers(-1, 1000)), max_size=12))
def test_host_metrics_and_fits_never_fail_on_odd_rows(values) -> None:
    rows_ = np.zeros(len(values), dtype=LOAD_DTYPE)
    for k, (interval, kernel, mb, kp, ki, tck) in enumerate(values):
        rows_[k]["interval_s"], rows_[k]["kernel_jiffies"], rows_[k]["megabytes"] = interval, kernel, mb
        rows_[k]["kilo_packets"], rows_[k]["kilo_interrupts"], rows_[k]["clk_tck"] = kp, ki, tck
    m = load.host_metrics(rows_)
    assert m.points == len(values)
    for v in (m.interrupts_per_s, m.packets_per_interrupt, m.kernel_cpu_pct, m.kernel_jiffies_per_mbyte):
        assert isinstance(v, float)
    try:
        load.fit(rows_)
    except Exception as exc:  # noqa: BLE001 - only the clear refusal may come out
        assert type(exc).__name__ == "UsageError" and str(exc).startswith("CPU model")


@given(st.lists(st.lists(_maybe(0, 1e4), min_size=3, max_size=3), max_size=6))
def test_table_2_columns_keep_only_tests_measured_in_every_run(values) -> None:
    names = ["udp-send-1472", "tcp-send", "tcp-accept"]

    def bench(name: str, thr: float) -> suite.Benchmark:
        return suite.Benchmark(name, name, 1, "", "Mbit/s", 0, 1.0, 1, 0, 1.0, "", thr, True, 1, 0, "", "ok", thr)

    runs = [(f"run{k}", [bench(n, v) for n, v in zip(names, row)]) for k, row in enumerate(values)]
    kept, dropped = suite.throughput_columns(runs)
    assert set(kept) | set(dropped) == (set(names) if values else set())
    for n, col in kept.items():
        assert len(col) == len(values) and np.isfinite(col).all()
    for n in dropped:
        assert any(math.isnan(row[names.index(n)]) for row in values)
