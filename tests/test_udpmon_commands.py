"""``nicrig udpmon latency`` and ``stream`` between two real hosts (network namespaces joined by veth).

Host B runs ``nicrig udpmon serve`` with a shared secret; host A runs the
commands. The results files are checked against themselves: every summary
figure must follow from the raw rows kept beside it.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys

import numpy as np
import pytest
from conftest import wait_accepting
from netns import two_hosts  # noqa: F401  (fixture)
from nicrig.udpmon.results import ResultsFile


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def nicrig(host, *args: str, check: bool = True):
    r = host.run([sys.executable, "-m", "nicrig", *args], capture_output=True, text=True, timeout=120)
    if check:
        assert r.returncode == 0, r.stderr
    return r


@pytest.fixture
def served(two_hosts, tmp_path):  # noqa: F811
    """Host B serving with a secret; yields (hosts, secret file)."""
    secret = tmp_path / "secret"
    secret.write_text("correct horse battery staple\n")
    secret.chmod(0o600)
    port = _free_port()
    daemon = two_hosts.b.popen([sys.executable, "-m", "nicrig", "udpmon", "serve", "--bind", two_hosts.b.address,
                                "--port", str(port), "--secret-file", str(secret)])
    two_hosts.b.wait_listening(port, daemon)
    yield two_hosts, secret, port
    daemon.terminate()
    daemon.wait(10)


def test_latency_between_two_hosts(served, tmp_path):
    hosts, secret, port = served
    out = tmp_path / "lat.h5"
    r = nicrig(hosts.a, "udpmon", "latency", hosts.b.address, "--port", str(port), "--secret-file", str(secret),
               "--sizes", "64,700,1472,1600,2200,2900", "--count", "50", "-o", str(out), "--json")
    summary = json.loads(r.stdout)
    assert [s["frames"] for s in summary["sizes"]] == [1, 1, 1, 2, 2, 2]
    assert all(s["count"] == 50 and s["timeouts"] == 0 and s["min_us"] > 0 for s in summary["sizes"])
    assert {f["frames"] for f in summary["fit_min"]} == {1, 2}
    with ResultsFile.open(out) as rf:
        assert rf.run_kind == "latency"
        rtt = rf.read_table("latency/rtt")
        sizes = rf.read_table("latency/sizes")
        hist = rf.read_table("latency/histogram")
        counters = rf.counters()
    assert len(rtt) == 6 * 50
    for row in sizes:
        mine = rtt[rtt["size_bytes"] == row["size_bytes"]]["rtt_ns"] / 1000
        assert row["median_us"] == pytest.approx(np.median(mine)) and row["min_us"] == pytest.approx(mine.min())
        assert hist[hist["size_bytes"] == row["size_bytes"]]["count"].sum() == 50
    with ResultsFile.open(out) as rf:
        visits = rf.read_table("latency/visits")
        settings = json.loads(rf.attrs["settings"])
    # ten rounds, each visiting every size once in a fresh order, five round trips a visit
    assert settings["rounds"] == 10 and settings["order"] == "random" and isinstance(settings["order_seed"], int)
    assert len(visits) == 60 and (visits["requests"] == 5).all()
    orders = [tuple(visits["size_bytes"][visits["round"] == r][np.argsort(visits["position"][visits["round"] == r])])
              for r in range(10)]
    assert all(sorted(o) == [64, 700, 1472, 1600, 2200, 2900] for o in orders) and len(set(orders)) > 1
    for size in (64, 700, 1472, 1600, 2200, 2900):
        assert visits["far_answered"][visits["size_bytes"] == size].sum() == 50
    assert (visits["far_refused_peer"] == 0).all() and (np.diff(visits["start_ns"]) > 0).all()
    # every singleton keeps its size, round, position and time, in the order measured
    for v in visits:
        mine = rtt[(rtt["round"] == v["round"]) & (rtt["position"] == v["position"])]
        assert (mine["size_bytes"] == v["size_bytes"]).all() and list(mine["seq"]) == list(range(5))
        assert v["start_ns"] <= mine["t_ns"][0] and (np.diff(mine["t_ns"]) > 0).all() and mine["t_ns"][-1] < v["end_ns"]
    assert summary["rounds"] == 10 and summary["order"] == "random" and summary["readings"]
    hosts_seen = {(h, w) for _, h, w, _ in counters}
    assert hosts_seen == {(h, w) for h in ("local", "remote") for w in ("before", "after", "delta")}
    remote_delta = next(c for _, h, w, c in counters if (h, w) == ("remote", "delta"))
    assert remote_delta["interface"] == hosts.b.interface
    assert remote_delta["udp"]["InDatagrams"] >= 6 * 50


def test_busy_poll_latency_spins_on_both_ends_and_says_so(served, tmp_path):
    hosts, secret, port = served
    out = tmp_path / "lat.h5"
    r = nicrig(hosts.a, "udpmon", "latency", hosts.b.address, "--port", str(port), "--secret-file", str(secret),
               "--sizes", "64,1400", "--count", "40", "--busy-poll", "-o", str(out), "--json")
    summary = json.loads(r.stdout)
    assert all(s["count"] == 40 for s in summary["sizes"])
    assert summary["wait"]["local"]["busy_poll"] and summary["wait"]["remote"]["busy_poll"]
    assert "so_busy_poll_us" in summary["wait"]["remote"]["socket"]
    with ResultsFile.open(out) as rf:
        attrs = rf.table_attrs("latency/sizes")
    assert (attrs["wait_local"], attrs["wait_remote"]) == ("busy-poll", "busy-poll")
    assert json.loads(attrs["wait_remote_detail"])["busy_poll"] is True


def test_stream_between_two_hosts(served, tmp_path):
    hosts, secret, port = served
    out = tmp_path / "bw.h5"
    r = nicrig(hosts.a, "udpmon", "stream", hosts.b.address, "--port", str(port), "--secret-file", str(secret),
               "--sizes", "64,1472", "--spacing-us", "10,20", "--count", "2000", "--rounds", "2", "--order-seed", "5",
               "-o", str(out), "--json")
    points = json.loads(r.stdout)["points"]
    # two rounds of the four streams, each round in its own order, drawn from the seed given
    rounds = [[(p["size_bytes"], p["spacing_us"]) for p in points if p["round"] == k] for k in (0, 1)]
    assert all(sorted(x) == [(64, 10), (64, 20), (1472, 10), (1472, 20)] for x in rounds)
    assert [p["position"] for p in points] == [0, 1, 2, 3] * 2 and [p["point"] for p in points] == list(range(8))
    rng = np.random.default_rng(5)
    items = [(64, 10), (64, 20), (1472, 10), (1472, 20)]
    assert rounds == [[items[k] for k in rng.permutation(4)] for _ in range(2)]
    with ResultsFile.open(out) as rf:
        table = rf.read_table("stream/points")
        sent = rf.read_table("stream/sent")
        received = rf.read_table("stream/received")
        spacing = rf.read_table("stream/spacing")
    for p in table:
        mine = received[received["point"] == p["point"]]
        assert p["sent"] == 2000 == (sent["point"] == p["point"]).sum()
        assert p["received"] + p["lost"] == 2000
        # the far end's own accounting came through: socket drops known, nothing foreign
        assert p["kernel_drops"] >= 0 and p["foreign"] == 0
        assert p["received"] == len(np.unique(mine["seq"]))
        assert p["duplicates"] == len(mine) - p["received"]
        mine_sent = sent[sent["point"] == p["point"]]
        ts, due = mine_sent["t_ns"], mine_sent["due_ns"]
        # the schedule is absolute: packet i is due at t0 + i * spacing and never leaves early
        assert (np.diff(due) == p["spacing_us"] * 1000).all() and (ts >= due).all()
        assert p["send_time_us"] == pytest.approx((ts[-1] - ts[0]) / 1000)
        recv_hist = spacing[(spacing["point"] == p["point"]) & (spacing["side"] == b"recv")]
        assert recv_hist["count"].sum() == (mine["kernel_ns"] > 0).sum() - 1
        assert p["user_rate_mbps"] > 0 and p["wire_rate_mbps"] > p["user_rate_mbps"]
        assert p["user_rate_ci95_mbps"] >= 0 or np.isnan(p["user_rate_ci95_mbps"])


def test_wrong_secret_is_refused_with_a_clear_message(served, tmp_path):
    hosts, _, port = served
    wrong = tmp_path / "wrong"
    wrong.write_text("not the secret\n")
    wrong.chmod(0o600)
    r = nicrig(hosts.a, "udpmon", "latency", hosts.b.address, "--port", str(port), "--secret-file", str(wrong),
               "--sizes", "64", "--count", "5", check=False)
    assert r.returncode == 2 and r.stderr.startswith("nicrig: error:") and "Traceback" not in r.stderr


def test_no_daemon_is_a_clear_error():
    r = subprocess.run([sys.executable, "-m", "nicrig", "udpmon", "latency", "127.0.0.1", "--port",
                        str(_free_port()), "--count", "1"], capture_output=True, text=True)
    assert r.returncode == 2 and "no udpmon daemon" in r.stderr


@pytest.mark.parametrize("host", ["::1", "localhost"])
def test_latency_to_an_ipv6_address_or_a_host_name(host):
    port = _free_port()
    bind = "::1" if ":" in host else "127.0.0.1"
    daemon = subprocess.Popen([sys.executable, "-m", "nicrig", "udpmon", "serve", "--bind", bind, "--port", str(port)],
                              stderr=subprocess.DEVNULL)
    try:
        wait_accepting(bind, port, daemon)
        r = subprocess.run([sys.executable, "-m", "nicrig", "udpmon", "latency", host, "--port", str(port),
                            "--sizes", "64,1000", "--count", "20", "--json"], capture_output=True, text=True,
                           timeout=60)
        assert r.returncode == 0, r.stderr
        assert [s["count"] for s in json.loads(r.stdout)["sizes"]] == [20, 20]
    finally:
        daemon.terminate()
        daemon.wait(10)


@pytest.mark.parametrize("argv, message", [
    (["--sizes", "8"], "16 to 65507"),
    (["--request-size", "16"], "--request-size 20 to 65507"),
    (["--sizes", "64:32:8"], "stop >= start"),
    (["--sizes", "sixty"], "not a number"),
    (["--rounds", "0"], "--rounds must be at least 1"),
    (["--count", "5", "--rounds", "6"], "at most --count (5)"),
    (["--order", "sideways"], "invalid choice"),
])
def test_bad_ranges_are_refused_before_connecting(argv, message):
    r = subprocess.run([sys.executable, "-m", "nicrig", "udpmon", "latency", "192.0.2.1", *argv],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and message in r.stderr

