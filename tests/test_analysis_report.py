"""``nicrig report`` on real udpmon results (a daemon on loopback) and a decoded simulated capture set.

Every number the report shows must be recomputable from the file and table
it names; bad input gives one clear error line and the right exit code.
"""

from __future__ import annotations

import csv
import io
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import simulate_set, udpmon_daemon_on_loopback
from nicrig.acquisition.sim.rig import Recording
from nicrig.udpmon.results import ResultsFile


def nicrig(*args: str, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    r = subprocess.run([sys.executable, "-m", "nicrig", *args], capture_output=True, text=True, timeout=timeout)
    if check:
        assert r.returncode == 0, r.stderr
    return r


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    """Real udpmon latency and stream results over loopback, and a decoded capture set of the simulated rig."""
    folder = tmp_path_factory.mktemp("report")
    with udpmon_daemon_on_loopback() as port:
        out = {"lat": folder / "lat.h5", "stream": folder / "stream.h5"}
        nicrig("udpmon", "latency", "127.0.0.1", "--port", str(port), "--sizes", "64:3000:256", "--count", "40",
               "-o", str(out["lat"]))
        nicrig("udpmon", "stream", "127.0.0.1", "--port", str(port), "--sizes", "64,1472",
               "--spacing-us", "0,20,40", "--count", "400", "-o", str(out["stream"]))
    out["cap"] = simulate_set(folder, "cap", nic="sk9843", bus="pci32-33", recording=Recording(with_ad=True),
                              kind="latency", size_bytes=1400, count=3)
    nicrig("decode", str(out["cap"]))
    out["raw"] = simulate_set(folder, "raw", kind="stream", size_bytes=200, count=5)
    return out


@pytest.fixture(scope="module")
def report_json(files) -> dict:
    r = nicrig("report", str(files["lat"]), str(files["stream"]), str(files["cap"]), "--format", "json",
               "--path", "memcpy:2000,pci32-33,gige,pci32-33,memcpy:2000")
    return json.loads(r.stdout)


def _section(rep: dict, start: str) -> dict:
    return next(s for s in rep["sections"] if s["title"].startswith(start))


def _table(section: dict, title: str) -> dict:
    return next(t for t in section["tables"] if t["title"].startswith(title))


def test_html_report_is_one_self_contained_page(files, tmp_path):
    out = tmp_path / "report.html"
    r = nicrig("report", str(files["lat"]), str(files["stream"]), str(files["cap"]), "-o", str(out))
    assert "wrote" in r.stderr
    page = out.read_text()
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    images = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
    assert len(images) >= 5  # latency vs size, histograms, throughput vs spacing, bus timeline, CPU model
    assert all(__import__("base64").b64decode(i).startswith(b"\x89PNG") for i in images)
    assert not re.search(r"(src|href)=['\"]?(https?:|//|/)", page)  # nothing fetched from elsewhere
    # a table of contents whose every link lands on an anchor of the page
    links = re.findall(r'href="#([^"]+)"', page)
    ids = set(re.findall(r'id="([^"]+)"', page))
    assert len(links) > 10 and set(links) <= ids
    for heading in ("Request-response latency", "Throughput against transmit spacing", "Bus-level timeline",
                    "Reference: expected slopes"):
        assert heading in page
    assert "Source:" in page and "latency/rtt" in page and "decoded/send_pci/pci" in page


def test_latency_numbers_trace_back_to_the_singletons(files, report_json):
    from nicrig.analysis import latency

    sec = _section(report_json, "Request-response latency")
    table = _table(sec, "RTT per response size")
    assert "latency/rtt" in table["source"]
    with ResultsFile.open(files["lat"]) as rf:
        rtt = rf.read_table("latency/rtt")
        stored = rf.read_table("latency/sizes")
        stored_fits = {k: rf.read_table(f"latency/fit_{k}") for k in ("min", "mean")}
    cols = table["columns"]
    for row in table["raw_rows"]:
        size = row[cols.index("size (bytes)")]
        ok = rtt["rtt_ns"][(rtt["size_bytes"] == size) & (rtt["rtt_ns"] >= 0)] / 1000
        assert row[cols.index("min (us)")] == pytest.approx(ok.min())
        assert row[cols.index("median (us)")] == pytest.approx(np.median(ok))
        assert row[cols.index("min (us)")] == pytest.approx(stored["min_us"][stored["size_bytes"] == size][0])
    # the same estimator made the stored lines, the report's and its per-round values
    est = latency.estimate(rtt)
    fits = _table(sec, "RTT = intercept + slope x size")
    by = {(r[0], r[1]): r for r in fits["raw_rows"]}
    for key, stat in (("min", "minimum"), ("mean", "mean")):
        for f in stored_fits[key]:
            row = by[(stat, int(f["frames"]))]
            assert row[fits["columns"].index("slope (us/byte)")] == pytest.approx(f["slope_us_per_byte"])
            assert row[fits["columns"].index("slope ± 95% (us/byte)")] == pytest.approx(f["slope_ci95"])
            assert est.fit(stat, int(f["frames"])).slope_us_per_byte == pytest.approx(f["slope_us_per_byte"])
    per_round = _table(sec, "Per-round values the lines go through")
    assert [r[2] for r in per_round["raw_rows"]] == [10] * len(per_round["raw_rows"])  # every size in all 10 rounds
    said = " ".join(sec["interpretation"])
    assert "Lines are fitted through the" in said and "spread of the 10 rounds' own lines" in said
    assert ("Over loopback no NIC" in said) != ("No physical reading" in said)
    assert "The path memory copy 2000 MB/s" in said or "observed slope" in said


def test_stream_numbers_trace_back_to_the_received_datagrams(files, report_json):
    from nicrig.analysis import throughput

    sec = _section(report_json, "Throughput against transmit spacing")
    with ResultsFile.open(files["stream"]) as rf:
        points = rf.read_table("stream/points")
        received = rf.read_table("stream/received")
    assert set(points["round"]) == {0, 1, 2} and len(points) == 3 * 6
    best = _table(sec, "Best throughput per size")
    assert "stream/points" in best["source"] and "stream/received" in best["source"]
    for row in best["raw_rows"]:
        rates = []
        for p in points[points["size_bytes"] == row[0]]:
            mine = received[received["point"] == p["point"]]
            r = throughput.receive_rate(mine["kernel_ns"], mine["seq"], int(p["size_bytes"]))  # loopback: no link
            assert r.user_rate_mbps == pytest.approx(p["user_rate_mbps"], nan_ok=True)  # udpmon stored the same
            rates.append((p["spacing_us"], r.user_rate_mbps))
        means = {sp: np.nanmean([v for s, v in rates if s == sp]) for sp, _ in rates}
        assert row[1] == pytest.approx(np.nanmax(list(means.values())))
        assert row[BEST_LINK] is None  # loopback: no link to compare with
    every = _table(sec, "Every size and spacing")
    assert len(every["raw_rows"]) == 6 and all(r[2] == 3 for r in every["raw_rows"])
    cpu = _section(report_json, "CPU model (Geist et al. n.d.)")
    model = _table(cpu, "T = alpha N_MB + beta N_KP + gamma N_KI")
    assert {r[0] for r in model["raw_rows"]} == {"local (127.0.0.1)", "remote (127.0.0.1)"}
    assert "stream.h5: load" in model["source"] and "lat.h5: load" in model["source"]
    for row in model["raw_rows"]:  # one point of the latency run and 18 streams, per host
        assert row[1] <= 19 and (row[-1] == "fitted" or "undetermined" in row[-1] or row[-1].startswith("not fitted"))


BEST_LINK = 5  # "link allows (Mbit/s)"


def test_capture_section_has_the_bus_timeline(report_json):
    sec = _section(report_json, "Bus-level timeline")
    steps = _table(sec, "Frames from send_pci to recv_pci")
    assert len(steps["raw_rows"]) == 3 + 2  # three requests, the median row of their one frame length, its counts
    assert steps["raw_rows"][-2][:2] == ["median of 3 frames", 110] and steps["excerpt"].startswith("every frame")
    cols = steps["columns"]
    assert steps["raw_rows"][-1][:2] == ["frames each median is of", 110]
    assert steps["raw_rows"][-1][cols.index("on the wire (us)")] == 3
    on_wire = steps["raw_rows"][-2][cols.index("on the wire (us)")]
    assert on_wire == pytest.approx((110 + 8) * 8 / 1000)  # a 64-byte request is a 110-byte frame
    measures = _table(sec, "Bus measurements")
    quantity = {r[0]: r[1:] for r in measures["raw_rows"]}
    assert quantity["bus clock period"][0] == pytest.approx(30, rel=0.01)
    assert quantity["CSR accesses retried (STOP#)"][0] > 0  # the SK-9843's refused CSR writes
    expected = _table(sec, "Expected against observed")
    assert any(r[0].startswith("send_pci: DMA rate") and r[1] == pytest.approx(133.33, rel=1e-3)
               for r in expected["raw_rows"])
    slope = next(i for i in sec["items"] if i["label"].startswith("RTT slope for this rig"))
    assert slope["raw"]["value"] is None and slope["raw"]["expected"] == pytest.approx(0.023)  # nothing observed


def test_reference_section_reproduces_the_seeds(report_json):
    ref = _section(report_json, "Reference")
    slopes = _table(ref, "Expected RTT slopes")
    assert [r[1] for r in slopes["raw_rows"]] == ["0.0075", "0.00375", "0.00188", "0.008", "0.023", "0.0155", "0.0118"]
    assert [r[2] for r in _table(ref, "Theoretical maxima")["raw_rows"]] == [957, 1914, 214, 428, 949]
    assert _table(ref, "The path given")["raw_rows"][-1][1] == pytest.approx(2 / 2000 + 2 * 0.0075 + 0.008)


def test_csv_has_a_row_per_number_with_its_source(files):
    r = nicrig("report", str(files["cap"]), "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(r.stdout)))
    assert rows and set(rows[0]) == {"section", "file", "table", "row", "column", "value", "ci95", "unit", "expected",
                                     "source"}
    assert all(row["source"] for row in rows)
    assert any(row["table"] == "Bus measurements" and row["column"] == "send_pci" for row in rows)


def test_json_flag_is_the_json_format(files):
    """``--json``, as on every command that prints data, gives the report --format json gives."""
    flag, option = (json.loads(nicrig("report", str(files["cap"]), *how).stdout)
                    for how in (["--json"], ["--format", "json"]))
    assert flag["sections"] and flag.pop("created_utc") and option.pop("created_utc")
    assert flag == option


def test_correlation_table_from_a_csv(files, tmp_path):
    table = tmp_path / "nics.csv"
    table.write_text("nic,udp_3way_max,udp_send_max,app:web,app:router\n"
                     "intel,1800,957,1500,900\nace,1100,955,900,500\n3com,1300,956,1100,700\nnetgear,900,957,800,400\n")
    r = nicrig("report", str(files["lat"]), "--correlation", str(table), "--format", "json")
    sec = _section(json.loads(r.stdout), "Microbenchmarks against applications")
    corr = _table(sec, "Correlation coefficients")
    assert corr["columns"] == ["microbenchmark", "web", "router"]
    web = np.array([1500, 900, 1100, 800.0])
    assert corr["raw_rows"][0][1] == pytest.approx(np.corrcoef([1800, 1100, 1300, 900], web)[0, 1])


def test_one_bad_file_among_good_ones_is_named_and_exit_is_1(files, tmp_path):
    import shutil

    import h5py

    junk = tmp_path / "junk.h5"
    junk.write_bytes(b"not hdf5 at all")
    bare = tmp_path / "bare.h5"  # as an instrument records it: no simulated results beside the sources
    shutil.copy(files["raw"], bare)
    with h5py.File(bare, "r+") as f:
        del f["results"]
    r = nicrig("report", str(files["lat"]), str(junk), str(bare), "--format", "json", check=False)
    assert r.returncode == 1
    rep = json.loads(r.stdout)
    assert len(rep["problems"]) == 2
    assert any("junk.h5" in p and "not a readable HDF5 file" in p for p in rep["problems"])
    assert any("bare.h5" in p and "nicrig decode" in p for p in rep["problems"])
    assert "nicrig: error:" in r.stderr and "Traceback" not in r.stderr
    # the simulated set undecoded: its results are reported, and the missing decode said
    r = nicrig("report", str(files["raw"]), "--format", "json")
    assert [s["title"] for s in json.loads(r.stdout)["sections"]][0].startswith("Throughput against transmit")
    assert "nicrig decode" in r.stderr and "results only" in r.stderr


@pytest.mark.parametrize("args, message", [
    (["missing.h5"], "no such file"),
    (["{lat}", "--path", "pci99-1"], "path element"),
    (["{lat}", "--link-rate", "3g"], "--link-rate"),
    (["{lat}", "--rtt-intercept-us", "-4"], "--rtt-intercept-us"),
    (["{lat}", "-o", "/nonexistent/folder/r.html"], "does not exist"),
    (["{lat}", "--correlation", "{lat}"], "cannot read"),
])
def test_bad_input_is_one_line_and_exit_2(files, tmp_path, args, message):
    args = [a.format(lat=files["lat"]) for a in args]
    r = nicrig("report", *args, check=False)
    assert r.returncode == 2, r.stderr
    assert message in r.stderr and "Traceback" not in r.stderr
    assert r.stderr.count("nicrig: error:") >= 1


def test_an_interrupted_report_leaves_no_file(files, tmp_path):
    out = tmp_path / "r.html"
    r = nicrig("report", str(files["lat"]), "--correlation", str(tmp_path / "absent.csv"), "-o", str(out),
               check=False)
    assert r.returncode == 2 and not out.exists() and not list(tmp_path.glob(".r.html*"))


def test_a_version_1_stream_file_still_feeds_the_cpu_model(files, tmp_path):
    """Version 1 had no load or hosts tables: the receiver's rows come from stream/points and the counters."""
    import h5py

    old = tmp_path / "old.h5"
    old.write_bytes(files["stream"].read_bytes())
    with h5py.File(old, "r+") as f:
        del f["load"], f["hosts"]
        f.attrs["format_version"] = 1
    rep = json.loads(nicrig("report", str(old), "--format", "json").stdout)
    model = _table(_section(rep, "CPU model (Geist et al. n.d.)"), "T = alpha N_MB + beta N_KP + gamma N_KI")
    assert [r[0] for r in model["raw_rows"]] == ["remote (127.0.0.1)"]
    assert "old.h5: stream/points + counters (receiver)" in model["source"]
    assert model["raw_rows"][0][1] <= 18
