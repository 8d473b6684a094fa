"""Seed 000's microbenchmark suite: its arithmetic, its rate search, the TCP loops, the daemon's new roles,
and the whole suite and the many-host aggregates between three network-namespace hosts."""

from __future__ import annotations

import json
import math
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from netns import three_hosts  # noqa: F401  (fixture)
from nicrig.udpmon import daemon as D
from nicrig.udpmon import flows as F
from nicrig.udpmon import protocol as P
from nicrig.udpmon import suite as S
from nicrig.udpmon import tcp
from nicrig.udpmon.client import Controller
from nicrig.udpmon.results import ResultsFile

SEED_FIGURES = json.loads(Path("/work/shared/reference/seed_figures.json").read_text()) \
    if Path("/work/shared/reference/seed_figures.json").exists() else None
SECRET = "correct horse battery staple 0123456789"


# ----------------------------------------------------------------------------- arithmetic


def test_theoretical_maxima_are_seed_000s_at_one_gigabit() -> None:
    at = {t.name: S.theoretical(t, 1000.0) for t in S.TESTS}
    expected = {"udp-send-1472": 957, "udp-recv-1472": 957, "udp-3way-1472": 1914, "udp-send-18": 214,
                "udp-recv-18": 214, "udp-3way-18": 428, "tcp-send": 949, "tcp-recv": 949}
    for name, mbps in expected.items():
        assert int(at[name]) == mbps, name  # the seed truncates: 2 x 214.29 = 428.57 is its "428"
    if SEED_FIGURES is not None:
        ref = SEED_FIGURES["theoretical_max_mbps_at_1gbps_seed000"]
        assert int(at["udp-send-1472"]) == ref["udp_send_or_recv_1472B"]
        assert int(at["udp-3way-18"]) == ref["udp_3way_18B"]
        assert int(at["tcp-send"]) == ref["tcp_send_or_recv_1460B"]
    # wire bytes: 1472 -> 1538 (a 1518-byte frame, preamble, gap), 18 -> the 64-byte minimum frame: 84
    assert S.udp_wire_bytes(1472) == 1538 and S.udp_wire_bytes(18) == 84 and S.udp_wire_bytes(1) == 84
    # scales with the link; jumbo frames raise the TCP maximum
    assert S.theoretical(S.TESTS[0], 10_000.0) == pytest.approx(10 * at["udp-send-1472"])
    assert S.theoretical(S.TESTS[6], 1000.0, mtu=9000) > at["tcp-send"]
    assert S.max_rate_per_s(S.TESTS[0], 1000.0) == pytest.approx(1e9 / (8 * 1538))


def test_flow_rates_follow_the_stream_definitions() -> None:
    # 1001 datagrams over 1 ms: 1e6 per second; 1472 bytes each: 11776 Mbit/s
    per_s, mbps = F.flow_rates("udp", 1472, 1001, 0, 0, 1_000_000)
    assert per_s == pytest.approx(1e6) and mbps == pytest.approx(8 * 1472)
    per_s, mbps = F.flow_rates("tcp", 0, 10_000, 125_000_000, 0, 1_000_000_000)
    assert math.isnan(per_s) and mbps == pytest.approx(1000.0)
    per_s, mbps = F.flow_rates("conn", 0, 11, 0, 0, 10_000_000)
    assert per_s == pytest.approx(1000.0) and math.isnan(mbps)
    assert F.flow_rates("udp", 18, 1, 0, 5, 5) == (0.0, 0.0)


# ----------------------------------------------------------------------------- the rate search


def _flow(delivered_per_s: float, lost: int) -> F.Flow:
    """1000 datagrams received at ``delivered_per_s``, ``lost`` more lost."""
    return F.Flow(label="peer", direction="out", protocol="udp", size_bytes=100, connections=0, sent=1000 + lost,
                  received=1000, lost=lost, bytes=100_000, first_ns=0, last_ns=round(999e9 / delivered_per_s),
                  clock="peer:CLOCK_REALTIME")


def _host(capacity: float) -> tuple[list[float], object]:
    """A host that delivers up to ``capacity`` datagrams/s and loses the rest."""
    tried: list[float] = []

    def trial(rate: float) -> S.Trial:
        tried.append(rate)
        delivered = min(rate, capacity)
        lost = 0 if rate <= capacity else max(1, round(1000 * (rate / capacity - 1)))
        return S.Trial("t", len(tried) - 1, len(tried) - 1, rate, (_flow(delivered, lost),), S.MBPS)
    return tried, trial


@settings(max_examples=60, deadline=None)
@given(capacity=st.floats(min_value=100.0, max_value=1e6), tolerance=st.sampled_from([0.01, 0.02, 0.05]))
def test_search_finds_the_highest_loss_free_rate(capacity: float, tolerance: float) -> None:
    hi = 1e6
    _, trial = _host(capacity)
    trials = S.search_rate(trial, start=hi, hi=hi, tolerance=tolerance, max_trials=40)
    best = S.best(trials)
    assert best is not None and best.lossless
    assert best.offered <= capacity
    assert best.offered >= capacity * (1 - 2 * tolerance) or best.offered >= hi * (1 - 1e-9)
    assert S.converged(trials, hi, tolerance)
    assert len(trials) <= 8  # the delivered-rate guess and the steps up from it converge fast


def test_search_stops_at_the_maximum_when_nothing_is_lost() -> None:
    tried, trial = _host(capacity=1e9)
    trials = S.search_rate(trial, start=1000, hi=8000, tolerance=0.02, max_trials=10)
    assert tried == [1000, 2000, 4000, 8000] and all(t.lossless for t in trials)
    assert S.converged(trials, 8000, 0.02)


def test_search_gives_up_after_its_trials_and_best_says_so() -> None:
    def trial(rate: float) -> S.Trial:  # loses at any rate
        return S.Trial("t", 0, 0, rate, (_flow(rate / 2, lost=1 + int(rate)),), S.MBPS)

    trials = S.search_rate(trial, start=100, hi=100, tolerance=0.02, max_trials=4)
    assert len(trials) == 4 and not S.converged(trials, 100, 0.02)
    chosen = S.best(trials)
    assert chosen is not None and not chosen.lossless and chosen.lost == min(t.lost for t in trials)
    assert S.best([]) is None


# ----------------------------------------------------------------------------- the TCP loops (127.0.0.1)


def _in_thread(fn, *args, **kwargs) -> tuple[threading.Thread, dict]:
    out: dict = {}
    t = threading.Thread(target=lambda: out.setdefault("r", fn(*args, **kwargs)), daemon=True)
    t.start()
    return t, out


def test_bulk_transfer_over_several_connections_in_one_loop() -> None:
    with tcp.listen_tcp(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]

        def sink() -> tcp.Bulk:
            socks, refused = tcp.accept_from(listener, peer_ip="127.0.0.1", count=4, timeout_ns=5_000_000_000)
            assert refused == 0 and len(socks) == 4
            try:
                return tcp.bulk_receive(socks, max_duration_ns=10**10, idle_timeout_ns=2 * 10**9)
            finally:
                tcp.close_all(socks)
        t, out = _in_thread(sink)
        socks = tcp.connect_all(("127.0.0.1", port), 4)
        sent = tcp.bulk_send(socks, duration_ns=200_000_000)
        tcp.close_all(socks)
        t.join(10)
    got = out["r"]
    assert got.stopped_by == "done" and sent.errors == 0
    assert got.total_bytes == sent.total_bytes > 0
    assert sorted(got.bytes) == sorted(sent.bytes)  # every connection's bytes arrived, connection by connection
    assert (got.first_ns >= 0).all() and got.rate_bps == pytest.approx(
        8 * got.total_bytes / ((got.last_ns.max() - got.first_ns.min()) / 1e9))


def test_connections_opened_and_closed_at_a_rate() -> None:
    with tcp.listen_tcp(("127.0.0.1", 0)) as listener:
        t, out = _in_thread(tcp.accept_and_close, listener, peer_ip="127.0.0.1", max_connections=300,
                            first_timeout_ns=5 * 10**9, idle_timeout_ns=2 * 10**9, max_duration_ns=30 * 10**9)
        res = tcp.initiate(listener.getsockname(), count=300, rate_per_s=3000, max_duration_ns=30 * 10**9)
        t.join(10)
    acc = out["r"]
    assert res.completed == 300 and res.failed == 0 and res.retransmitted == 0 and res.stopped_by == "count"
    assert len(acc.accepted_ns) == 300 and acc.refused_peer == 0 and acc.stopped_by == "count"
    # the schedule: attempt i due at t0 + i/rate, never started before it
    assert np.diff(res.due_ns) == pytest.approx(1e9 / 3000, abs=1)
    assert (res.start_ns >= res.due_ns).all() and (res.established_ns >= res.start_ns).all()
    assert (res.closed_ns >= res.established_ns).all()


def _syn_sent_to(port: int) -> bool:
    """Whether a socket of this host is in SYN-SENT toward 127.0.0.1:``port`` (/proc/net/tcp, state 02): its
    SYN went unanswered."""
    with open("/proc/net/tcp") as table:
        next(table)
        return any(f[2] == f"{socket.htonl(0x7F000001):08X}:{port:04X}" and f[3] == "02" for f in map(str.split, table))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="TCP_INFO and /proc/net/tcp are Linux's")
def test_a_dropped_syn_is_the_kernels_count_not_a_guess_from_time() -> None:
    """A full accept queue drops a SYN (listen backlog 0 holds one connection, here a filler): the attempt
    establishes after the kernel resends it, and TCP_INFO's count says so. A handshake that only looks slow
    (the process was not running for a second: a loaded host) is no retransmission."""
    with tcp.listen_tcp(("127.0.0.1", 0), backlog=0) as listener, socket.create_connection(listener.getsockname()):
        port = listener.getsockname()[1]

        def accept_once_the_syn_is_dropped(**kw):
            deadline = time.monotonic() + 10
            while not _syn_sent_to(port) and time.monotonic() < deadline:
                time.sleep(0.01)
            return tcp.accept_and_close(listener, **kw)

        t, out = _in_thread(accept_once_the_syn_is_dropped, peer_ip="127.0.0.1", max_connections=2,
                            first_timeout_ns=5 * 10**9, idle_timeout_ns=5 * 10**9, max_duration_ns=20 * 10**9)
        res = tcp.initiate(listener.getsockname(), count=1, rate_per_s=100, max_duration_ns=20 * 10**9)
        t.join(10)
    assert res.completed == 1 and list(res.syn_retransmits) == [1] and res.retransmitted == 1
    assert len(out["r"].accepted_ns) == 2  # the filler and the attempt

    second = 10**9
    start, est = np.zeros(4, np.int64), np.array([5 * second, second // 100, 5 * second, -1])
    assert tcp.handshakes_retransmitted(start, est, np.array([0, 1, -1, -1])) == 2  # counted, counted, by time
    assert tcp.handshakes_retransmitted(start, est, None) == 2  # a daemon that sends no count: by time alone


def test_connection_attempts_fail_with_their_errno() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, not listening: refused
        res = tcp.initiate(("127.0.0.1", port), count=5, rate_per_s=1000, max_duration_ns=5 * 10**9)
    assert res.failed == 5 and res.completed == 0 and set(res.error) == {111}  # ECONNREFUSED


def test_loops_end_on_the_stop_pipe() -> None:
    r, w = os.pipe()
    with tcp.listen_tcp(("127.0.0.1", 0)) as listener:
        t, out = _in_thread(tcp.accept_and_close, listener, peer_ip="127.0.0.1", max_connections=10,
                            first_timeout_ns=60 * 10**9, idle_timeout_ns=60 * 10**9, max_duration_ns=60 * 10**9,
                            stop_fd=r)
        time.sleep(0.1)
        os.write(w, b"s")
        t.join(60)  # at once; the loop's own timeouts are a minute
    assert not t.is_alive() and out["r"].stopped_by == "stop"
    os.close(r)
    os.close(w)


# ----------------------------------------------------------------------------- the daemon's new roles


@contextmanager
def daemon(**config: object) -> Iterator[D.Daemon]:
    d = D.Daemon(D.Config(port=0, **config), log=lambda _line: None)
    d.listen()
    t = threading.Thread(target=d.serve_forever, daemon=True)
    t.start()
    try:
        yield d
    finally:
        d.shutdown()
        t.join(10)


def _remote(ctl: Controller, label: str = "peer") -> F.Remote:
    family, address = ctl.peer
    return F.Remote(label=label, host=ctl.host, port=ctl.port, ctl=ctl, family=family, address=address,
                    local_ip=ctl.local_address, interface="lo", limits=ctl.limits())


def test_daemon_sends_a_paced_stream_to_its_controller_only() -> None:
    with daemon() as d, Controller(*d.address) as ctl:
        r = _remote(ctl)
        (flow,) = F.udp_trial([], [r], size_bytes=200, spacing_ns=50_000, count=400)
        assert flow.direction == "in" and flow.sent == 400 and flow.received + flow.lost == 400
        assert flow.received > 300 and flow.bytes == 200 * flow.received and flow.first_ns < flow.last_ns
        # a spacing faster than the daemon's rate cap is refused, naming the option to raise
        with pytest.raises(P.LimitError, match="--max-rate-pps"):
            ctl.start_sender(test_id=1, count=10, size_bytes=100, spacing_ns=1000, peer_udp_port=40000,
                             duration_s=1)
        with pytest.raises(P.RequestError, match="peer_udp_port"):
            ctl.start_sender(test_id=1, count=10, size_bytes=100, spacing_ns=10_000, peer_udp_port=0, duration_s=1)


def test_daemon_tcp_roles_sink_source_acceptor_connector() -> None:
    with daemon() as d, Controller(*d.address) as ctl:
        r = _remote(ctl)
        (out_flow,) = F.tcp_bulk_trial([r], "out", connections=3, duration_ns=150_000_000)
        assert out_flow.connections == 3 and out_flow.received == out_flow.sent > 0 and out_flow.lost == 0
        (in_flow,) = F.tcp_bulk_trial([r], "in", connections=2, duration_ns=150_000_000)
        assert in_flow.received == in_flow.sent > 0 and in_flow.rate_mbps > 0
        acc = F.accept_trial(r, count=200, rate_per_s=2000)
        assert acc.received == 200 and acc.lost == 0 and acc.rate_per_s > 0
        ini = F.initiate_trial(r, count=200, rate_per_s=2000)
        assert ini.received == 200 and ini.lost == 0 and ini.rate_per_s > 0
        with pytest.raises(P.LimitError, match="--max-connections"):
            ctl.start_tcp_sink(connections=100_000, duration_s=1, idle_timeout_ms=100)


def test_daemon_refuses_interface_changes_unless_allowed() -> None:
    with daemon() as d, Controller(*d.address) as ctl:
        with pytest.raises(P.LimitError, match="--allow-tuning"):
            ctl.set_interface({"mtu": 1500})
        with pytest.raises(P.RequestError, match="unknown setting"):
            ctl.check_interface({"rx-usec": 3})
        with pytest.raises(P.RequestError, match="takes an integer"):
            ctl.check_interface({"mtu": "9000"})
        assert ctl.check_interface({"mtu": 1500})["allow_tuning"] is False


# ----------------------------------------------------------------------------- three namespace hosts


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve(host, secret: Path, *extra: str, env: dict[str, str] | None = None) -> int:
    """``nicrig udpmon serve`` on ``host``; returns its control port once it accepts connections."""
    port = _free_port()
    proc = host.popen([sys.executable, "-m", "nicrig", "udpmon", "serve", "--bind", host.address, "--port",
                       str(port), "--secret-file", str(secret), *extra], stderr=subprocess.DEVNULL, env=env)
    host.wait_listening(port, proc)
    return port


@pytest.fixture
def three_served(three_hosts, tmp_path):  # noqa: F811
    secret = tmp_path / "secret"
    secret.write_text(SECRET + "\n")
    secret.chmod(0o600)
    if not three_hosts.isolated:
        pytest.skip(reason=f"three hosts need network namespaces: {three_hosts.fallback_reason}")
    ports = {h.name: serve(h, secret) for h in (three_hosts.b, three_hosts.c)}
    return three_hosts, secret, ports


def nicrig(host, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    r = host.run([sys.executable, "-m", "nicrig", *args], capture_output=True, text=True, timeout=300)
    if check:
        assert r.returncode == 0, r.stderr
    return r


def test_suite_between_three_hosts(three_served, tmp_path) -> None:
    hosts, secret, ports = three_served
    out = tmp_path / "suite.h5"
    r = nicrig(hosts.a, "udpmon", "suite", "--peer", f"{hosts.b.address}:{ports['b']}",
               "--third", f"{hosts.c.address}:{ports['c']}", "--secret-file", str(secret),
               "--trial-s", "0.1", "--max-trials", "2", "--connections", "1,2", "--link-mbps", "1000", "-o", str(out))
    lines = r.stdout.splitlines()
    assert lines[0].startswith(f"Pai, Rixner and Kim 2004 microbenchmarks on {hosts.a.address} ({hosts.a.interface})")
    for t in S.TESTS:
        assert any(t.title in line for line in lines), t.title
    with ResultsFile.open(out) as rf:
        assert rf.run_kind == "suite"
        tests = rf.read_table("suite/tests")
        trials = rf.read_table("suite/trials")
        flows = rf.read_table("suite/flows")
        load = rf.read_table("load")
        counters = rf.counters()
        hosts_row = rf.read_table("hosts")
        link = rf.table_attrs("suite/tests")["link_mbps"]
    assert link == 1000.0  # seed 000's 1 Gbit/s, so that the maxima are its figures
    assert [t.decode() for t in tests["test"]] == list(S.TEST_NAMES)
    assert list(tests["paper_test"]) == list(range(1, 11))
    assert [int(v) for v in tests["theoretical"][:8]] == [957, 957, 1914, 214, 214, 428, 949, 949]
    assert (tests["trials"] >= 1).all() and (tests["throughput"] > 0).all()
    assert np.allclose(tests["percent_of_theoretical"], 100 * tests["throughput"] / tests["theoretical"])
    # the 3-way tests sent to the peer while receiving from the third host
    three_way = flows[flows["test"] == b"udp-3way-1472"]
    assert {(h, d) for h, d in zip(three_way["host"], three_way["direction"])} == {(b"peer", b"out"),
                                                                                  (b"third", b"in")}
    # every reported throughput follows from the flow rows kept beside it
    for t in trials:
        mine = flows[flows["point"] == t["point"]]
        assert len(mine) >= 1
        rates = [F.flow_rates(f["protocol"].decode(), int(f["size_bytes"]), int(f["received"]), int(f["bytes"]),
                              int(f["first_ns"]), int(f["last_ns"])) for f in mine]
        if t["unit"] == b"conn/ms":
            assert t["throughput"] == pytest.approx(sum(p for p, _ in rates) / 1000)
        else:
            assert t["throughput"] == pytest.approx(sum(m for _, m in rates))
        assert t["lossless"] == all(f["lost"] == 0 and f["received"] > 0 for f in mine)
    for row in tests:
        best = trials[trials["point"] == row["best_point"]]
        assert len(best) == 1 and best["throughput"][0] == pytest.approx(row["throughput"])
    # CPU-model inputs for every trial and every host it involved
    assert set(load["point"]) == set(trials["point"])
    assert {h for h in load["host"]} == {b"local", b"peer", b"third"}
    assert (load["kilo_packets"][load["host"] == b"local"] > 0).all()
    assert {(p, h) for p, h, w, _ in counters if w == "delta"} == {(int(p), h.decode()) for p, h in
                                                                   zip(load["point"], load["host"])}
    assert [h.decode() for h in hosts_row["host"]] == ["local", "peer", "third"]
    assert hosts_row["interface"][1].decode() == hosts.b.interface
    # the analysis fits seed 004's CPU model to these runs: this host's kernel time over its trials
    from nicrig.analysis.cpu import fit_cpu_model

    mine = load[load["host"] == b"local"]
    fit = fit_cpu_model(mine["kernel_jiffies"], mine["megabytes"], mine["kilo_packets"], mine["kilo_interrupts"])
    usable = np.isfinite(mine["kernel_jiffies"]) & np.isfinite(mine["kilo_interrupts"])
    assert fit.runs == usable.sum() == len(trials) and fit.unit == "jiffies"
    assert fit.observed == pytest.approx(mine["kernel_jiffies"][usable])


def test_suite_without_a_third_host_skips_3way_and_says_why(three_served, tmp_path) -> None:
    hosts, secret, ports = three_served
    r = nicrig(hosts.a, "udpmon", "suite", "--peer", f"{hosts.b.address}:{ports['b']}", "--secret-file",
               str(secret), "--tests", "udp-3way-18,tcp-accept", "--trial-s", "0.1", "--max-trials", "1", "--json")
    doc = json.loads(r.stdout)
    # the link rate comes from the interface (a veth states 10 Gbit/s) and the maxima scale with it
    speed = int(hosts.a.run(["cat", f"/sys/class/net/{hosts.a.interface}/speed"]).stdout)
    assert doc["link_mbps"] == speed and doc["link_source"] == f"{hosts.a.interface} link speed"
    by = {t["test"]: t for t in doc["tests"]}
    assert by["udp-3way-18"]["theoretical"] == pytest.approx(2 * speed * 18 / 84)
    assert list(by) == ["udp-3way-18", "tcp-accept"]  # seed order
    assert by["udp-3way-18"]["trials"] == 0 and "--third" in by["udp-3way-18"]["status"]
    assert by["tcp-accept"]["trials"] == 1 and by["tcp-accept"]["throughput"] > 0


def test_aggregate_n_to_1_and_1_to_n(three_served, tmp_path) -> None:
    hosts, secret, ports = three_served
    daemons = [f"{hosts.b.address}:{ports['b']}", f"{hosts.c.address}:{ports['c']}"]
    out = tmp_path / "agg.h5"
    r = nicrig(hosts.a, "udpmon", "aggregate", *daemons, "--secret-file", str(secret), "--direction", "in",
               "--size", "1000", "--spacing-us", "50", "--count", "1000", "-o", str(out), "--json")
    doc = json.loads(r.stdout)
    assert [f["host"] for f in doc["flows"]] == ["r1", "r2"]
    assert [f["address"] for f in doc["flows"]] == [hosts.b.address, hosts.c.address]
    assert all(f["direction"] == "in" and f["sent"] == 1000 and f["received"] + f["lost"] == 1000
               and f["received"] > 0 for f in doc["flows"])
    total = doc["total"]
    assert total["received"] == sum(f["received"] for f in doc["flows"])
    assert total["sum_rate_mbps"] == pytest.approx(sum(f["rate_mbps"] for f in doc["flows"]))
    # both flows arrived here, on one clock: the rate over their common span is defined
    first = min(f["first_ns"] for f in doc["flows"])
    last = max(f["last_ns"] for f in doc["flows"])
    assert total["span_rate_mbps"] == pytest.approx(8 * total["bytes"] / (last - first) * 1e3)
    with ResultsFile.open(out) as rf:
        assert rf.run_kind == "aggregate"
        assert len(rf.read_table("aggregate/flows")) == 2 and len(rf.read_table("aggregate/total")) == 1
        assert {h.decode() for h in rf.read_table("load")["host"]} == {"local", "r1", "r2"}
    r = nicrig(hosts.a, "udpmon", "aggregate", *daemons, "--secret-file", str(secret), "--direction", "out",
               "--protocol", "tcp", "--connections", "2", "--duration-s", "0.3", "--json")
    doc = json.loads(r.stdout)
    assert all(f["direction"] == "out" and f["protocol"] == "tcp" and f["received"] == f["sent"] > 0
               for f in doc["flows"])
    assert doc["total"]["span_rate_mbps"] is None  # two receivers, two clocks: only the sum is defined


@pytest.mark.parametrize("argv, message", [
    (["suite", "--peer", "192.0.2.1", "--tests", "udp-send-9000"], "unknown test"),
    (["suite", "--peer", "192.0.2.1", "--trial-s", "0"], "--trial-s"),
    (["suite", "--peer", "192.0.2.1:99999"], "not a port"),
    (["suite", "--peer", "192.0.2.1", "--connections", "0"], "at least 1"),
    (["aggregate", "192.0.2.1", "--size", "8"], "--size"),
])
def test_bad_options_are_refused_before_connecting(argv, message) -> None:
    r = subprocess.run([sys.executable, "-m", "nicrig", "udpmon", *argv], capture_output=True, text=True, timeout=60,
                       check=False)
    assert r.returncode == 2 and message in r.stderr and "Traceback" not in r.stderr
