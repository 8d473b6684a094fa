"""udpmon runs with ``--trace-host`` between two network namespaces: kernel events of both ends, the far one
recorded by its daemon (``serve --allow-trace``), stored with the clock offset between the hosts.

Needs root (tracefs); the namespaces share one kernel, so both traces see the same events and the true
clock offset is zero: a truth the estimate must hold within its uncertainty.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # the GUI's pictures of a traced run, without a display

import numpy as np
import pytest
from netns import two_hosts  # noqa: F401  (fixture)
from nicrig.acquisition.hostprobe import events as hp
from nicrig.acquisition.hostprobe import tracefs
from nicrig.analysis.quantity import K95, rectangular
from nicrig.udpmon.results import ResultsFile

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="kernel tracing needs root")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _secret(folder) -> str:
    secret = folder / "secret"
    secret.write_text("correct horse battery staple\n")
    secret.chmod(0o600)
    return str(secret)


def _serve(host, port: int, secret: str, *extra: str):
    daemon = host.popen([sys.executable, "-m", "nicrig", "udpmon", "serve", "--bind", host.address, "--port",
                         str(port), "--secret-file", secret, *extra])
    host.wait_listening(port, daemon)
    return daemon


@pytest.fixture(scope="module")
def traced_stream(tmp_path_factory):
    """One traced stream run from host a to host b's daemon: (hosts, results path, the command's output)."""
    from netns import netns_hosts

    folder = tmp_path_factory.mktemp("traced")
    out, secret = folder / "stream.h5", _secret(folder)
    with netns_hosts(2) as hosts:
        port = _free_port()
        daemon = _serve(hosts.b, port, secret, "--allow-trace")
        try:
            r = hosts.a.run([sys.executable, "-m", "nicrig", "udpmon", "stream", hosts.b.address, "--port", str(port),
                             "--secret-file", secret,
                             "--sizes", "1000", "--spacing-us", "0,50", "--count", "1000", "--rounds", "1",
                             "--trace-host", "-o", str(out)], capture_output=True, text=True, timeout=120)
        finally:
            daemon.terminate()
            daemon.wait(10)
        yield hosts, out, r


def test_both_ends_recorded_with_their_clock_offset(traced_stream):
    hosts, out, r = traced_stream
    assert r.returncode == 0, r.stderr
    with ResultsFile.open(out) as rf:
        assert hp.hosts(rf) == ["local", "remote"]
        local, remote = hp.read(rf, "local"), hp.read(rf, "remote")
        received = rf.read_table("stream/received")
    assert local.clock == remote.clock == "mono" and local.lost == remote.lost == 0
    # one kernel under both namespaces: the true offset is 0, and the estimate's interval must hold it
    assert remote.clock_reference == "local" and 0 < remote.clock_offset_uncertainty_ns < 50e6
    assert abs(remote.clock_offset_ns) <= remote.clock_offset_uncertainty_ns
    # each end recorded its own engine's system calls: the far daemon's receiver thread among them
    for trace in (local, remote):  # some calls (a subset holds vacuously), and only the followed threads'
        calls = trace.of("raw_syscalls:sys_enter")
        assert len(calls) > 0 and set(calls["pid"]) <= set(trace.pids), trace.host
    # every datagram (1000 + 28 bytes) the far end received was handed to the stack on its veth
    rx = remote.of("net:netif_receive_skb")
    rx = rx[(rx["len"] == 1028) & (rx["device"] == hosts.b.interface.encode())]
    assert len(rx) >= len(received) > 100
    assert not tracefs.stale_instances(tracefs.root())


def test_a_daemon_without_allow_trace_refuses_clearly(two_hosts, tmp_path):  # noqa: F811
    port, secret = _free_port(), _secret(tmp_path)
    daemon = _serve(two_hosts.b, port, secret)
    out = tmp_path / "refused.h5"
    try:
        r = two_hosts.a.run([sys.executable, "-m", "nicrig", "udpmon", "latency", two_hosts.b.address, "--port",
                             str(port), "--secret-file", secret, "--sizes", "64", "--count", "10", "--trace-host",
                             "-o", str(out)],
                            capture_output=True, text=True, timeout=120)
    finally:
        daemon.terminate()
        daemon.wait(10)
    assert r.returncode == 2
    assert "kernel tracing is not permitted on this daemon" in r.stderr and "--allow-trace" in r.stderr
    assert not out.exists() and not tracefs.stale_instances(tracefs.root())


def test_stream_packets_matched_to_net_rx_runs_and_polls(traced_stream):
    from nicrig.analysis import hostprobe
    from nicrig.analysis.report import stream_windows

    hosts, out, r = traced_stream
    with ResultsFile.open(out) as rf:
        remote = hp.read(rf, "remote")
        points, sent = rf.read_table("stream/points"), rf.read_table("stream/sent")
        received = rf.read_table("stream/received")
    windows = stream_windows(points, sent, received, remote.clock_offset_ns)
    shift = -int(round(remote.clock_offset_ns))
    for k, p in enumerate(points):
        d = hostprobe.deliveries(remote, hosts.b.interface, int(p["size_bytes"]), int(windows.t0_ns[k]) + shift,
                                 int(windows.t1_ns[k]) + shift)
        mine = received[received["point"] == p["point"]]
        # every datagram the engine received went up the stack in a NET_RX softirq, in a NAPI poll
        assert len(d.receive_ns) >= len(mine) > 0
        assert d.softirq.all() and (d.poll >= 0).all()
        work = d.polls["work"][np.unique(d.poll)]
        assert ((work >= 1) & (work <= d.polls["budget"][np.unique(d.poll)])).all()
        assert work.sum() >= len(d.receive_ns)
        if p["kernel_drops"] == 0:  # in order, none lost in between: the i-th up the stack is the i-th returned
            assert (mine["user_ns"] >= d.receive_ns[:len(mine)]).all()


def test_report_shows_the_host_probe(traced_stream, tmp_path):
    import json

    hosts, out, _ = traced_stream
    report = tmp_path / "r.json"
    r = hosts.a.run([sys.executable, "-m", "nicrig", "report", str(out), "--format", "json", "-o", str(report)],
                    capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    sec = next(s for s in json.loads(report.read_text())["sections"] if s["title"].startswith("Host probe"))
    polls = next(t for t in sec["tables"] if t["title"].startswith("Interrupts and NAPI polls"))
    by_host = {row[0]: dict(zip(polls["columns"], row)) for row in polls["raw_rows"]}
    assert set(by_host) == {"local", "remote"} and by_host["remote"]["device"] == hosts.b.interface
    assert by_host["remote"]["frames received"] > 100
    assert 1 <= by_host["remote"]["frames per poll (mean of non-empty)"] <= by_host["remote"]["poll budget"]
    per_point = next(t for t in sec["tables"] if t["title"].startswith("Per stream point"))
    assert len(per_point["raw_rows"]) == 2 * 2  # two points, two hosts
    # the delivery path of each point's packets on the receiving host: all up the stack in NET_RX, by a poll
    for row in (dict(zip(per_point["columns"], r)) for r in per_point["raw_rows"]):
        delivered = (row["received inside a NET_RX run (%)"], row["received in a NAPI poll (%)"])
        assert delivered == ((100.0, 100.0) if row["host"] == "remote" else (None, None)), row
    assert sec["figures"]
    # each datagram's delays, over the datagrams paired, and the pairing's count of the rest with its reasons
    pairing = {row[0]: dict(zip(t["columns"], row)) for t in sec["tables"]
               if t["title"].startswith("Datagrams paired") for row in t["raw_rows"]}
    with ResultsFile.open(out) as rf:
        sent, received = rf.read_table("stream/sent"), rf.read_table("stream/received")
    assert pairing["local"]["datagrams"] == int((sent["t_ns"] >= 0).sum())
    assert pairing["remote"]["datagrams"] == len(received)
    for row in pairing.values():
        assert row["paired"] + row["not paired"] == row["datagrams"] and row["paired"] > 0
        if row["not paired"]:
            assert sum(int(part.rsplit(": ", 1)[1]) for part in row["why not (datagrams)"].split("; ")) \
                == row["not paired"]
    delays = next(t for t in sec["tables"] if t["title"].startswith("Each datagram's path"))
    for row in (dict(zip(delays["columns"], r)) for r in delays["raw_rows"]):
        host = row["host"].split(" to ")[0] if "one kernel" not in row["host"] else "remote"
        assert row["datagrams"] <= pairing[host]["paired"] and 0 <= row["median"] <= row["p90"]
        # hundreds of datagrams: the median's interval lies within the body of the delays, below their p90
        assert 0 < row["median ± 95%"] <= row["p90"]


def test_gui_draws_host_lanes_beside_the_packets(traced_stream, tmp_path):
    from nicrig.gui.document import Document

    hosts, out, _ = traced_stream
    doc = Document(out)
    try:
        titles = {(lane.source, lane.title) for lane in doc.lanes}
        assert {("host:local", "cpu0 softirq"), ("host:remote", "engine system calls"),
                (f"udpmon:{out.name}", "sent (engine)"), (f"udpmon:{out.name}", "received (far engine)")} <= titles
        polls = [lane for lane in doc.lanes if lane.source == "host:remote" and lane.title.endswith("NAPI poll")]
        assert sum(len(lane.boxes) for lane in polls) > 0
        i = next(lane for lane in polls if len(lane.boxes))
        assert "frames" in i.boxes.labels(0)[0]
        # one timeline: the far engine's receive returns fall inside the far host's trace, offset applied
        received = next(lane for lane in doc.lanes if lane.title == "received (far engine)").boxes
        remote = next(t for t in doc.traces if t.host == "remote")
        lo = remote.start_ns + remote.clock_offset_ns - doc.base_ns - remote.clock_offset_uncertainty_ns
        hi = remote.end_ns + remote.clock_offset_ns - doc.base_ns + remote.clock_offset_uncertainty_ns
        assert lo <= received.t_ns.min() and received.t_ns.max() <= hi
        first = float(received.t_ns[0]) / 1000
    finally:
        doc.close()
    png = tmp_path / "hosts.png"
    r = subprocess.run([sys.executable, "-m", "nicrig", "gui", str(out), "--screenshot", str(png), "--view",
                        "timeline", "--range", f"{first - 200}:{first + 800}", "--size", "1400x900"],
                       capture_output=True, text=True, timeout=300, env={**os.environ, "QT_QPA_PLATFORM": "offscreen"})
    assert r.returncode == 0, r.stderr
    assert png.stat().st_size > 20000


def test_the_host_lanes_picture_is_legible(traced_stream, tmp_path, qtbot):
    """The demo's picture of a traced run: the calls of two threads overlap in one lane, and their names must not."""
    from gui_geometry import window_problems
    from nicrig.gui.app import MainWindow
    from nicrig.gui.screenshot import render

    _, out, _ = traced_stream
    w = MainWindow([out])
    qtbot.addWidget(w)
    w.resize(1400, 1000)
    render(w, tmp_path / "hosts.png", "timeline", None, None, False)
    engine = [t for item in w.timeline.items if item.lane.title == "engine system calls" for _, t in item.written]
    assert any(t.startswith(("recvmmsg", "sendmmsg", "ppoll", "poll")) for t in engine), engine
    assert window_problems(w) == []


def test_perfetto_export_holds_every_packet(traced_stream, tmp_path):
    from test_hostprobe_export import _read, _slices

    hosts, out, _ = traced_stream
    pf = tmp_path / "run.perfetto-trace"
    r = subprocess.run([sys.executable, "-m", "nicrig", "trace", "export", str(out), "-o", str(pf)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    slices = _slices(_read(pf))
    with ResultsFile.open(out) as rf:
        sent, received = rf.read_table("stream/sent"), rf.read_table("stream/received")
        local = hp.read(rf, "local")
    assert len(slices["sent (engine)"]) == int((sent["t_ns"] >= 0).sum())
    assert len(slices["received (far engine)"]) == len(received)
    # packets keep their CLOCK_MONOTONIC times: the view's zero is the near host's trace start
    assert sorted(t for t, _, _ in slices["sent (engine)"]) == sorted(sent["t_ns"][sent["t_ns"] >= 0].tolist())
    assert local.start_ns <= min(t for t, _, _ in slices["sent (engine)"])


def test_gui_measures_the_hosts_between_the_cursors(traced_stream):
    from nicrig.gui.document import Document
    from nicrig.gui.measurements import measure_range

    hosts, out, _ = traced_stream
    doc = Document(out)
    try:
        t0, t1 = doc.extent_ns()
        found = measure_range({}, [], t0, t1, hosts=[(t, doc.host_shift_ns(t)) for t in doc.traces])
    finally:
        doc.close()
    text = {m.name.strip(): m.value for m in found}
    assert "host local: kernel events" in text and "host remote: kernel events" in text
    polls, rest = text["NAPI polls, frames per poll (most)"].split(", ", 1)
    assert int(polls) > 0 and 1 <= float(rest.split()[0]) <= 64
    assert text["CPU in NET_RX"].endswith("%")
    # to one event in the span, not finer: the last digit shown is that of the 95% half-width one event's
    # resolution gives (at most two significant digits, and those beginning with 1 or 2: a place of a thirtieth
    # of it or coarser), and no coarser than the half-width itself
    half = K95 * rectangular(1.0 / ((t1 - t0) / 1e9))
    for name in ("hard IRQs per s", "NET_RX softirq runs per s"):
        place = 10.0 ** -len(text[name].partition(".")[2])
        assert half / 30 <= place <= half, (text[name], half)


@pytest.fixture(scope="module")
def loopback_stream(tmp_path_factory):
    """One traced stream run on loopback, daemon and controller in the root namespace: (results path, output)."""
    folder = tmp_path_factory.mktemp("loopback")
    out, secret, port = folder / "stream.h5", _secret(folder), _free_port()
    daemon = subprocess.Popen([sys.executable, "-m", "nicrig", "udpmon", "serve", "--bind", "127.0.0.1", "--port",
                               str(port), "--secret-file", secret, "--allow-trace"])
    try:
        from netns import Host

        Host("lo", "127.0.0.1", "lo", None).wait_listening(port, daemon)
        r = subprocess.run([sys.executable, "-m", "nicrig", "udpmon", "stream", "127.0.0.1", "--port", str(port),
                            "--secret-file", secret, "--sizes", "1472", "--spacing-us", "0,20", "--count", "500",
                            "--rounds", "1", "--trace-host", "-o", str(out)], capture_output=True, text=True,
                           timeout=120)
    finally:
        daemon.terminate()
        daemon.wait(10)
    yield out, r


def _paths(out):
    from nicrig.analysis import packetpath

    with ResultsFile.open(out) as rf:
        traces = [hp.read(rf, h) for h in hp.hosts(rf)]
        points, sent, received = (rf.read_table(f"stream/{t}") for t in ("points", "sent", "received"))
    return packetpath.stream_paths(traces, points, sent, received), points, sent, received


@pytest.mark.parametrize("run", ["veth", "loopback"])
def test_every_delay_is_one_datagrams_own(run, request):
    """Each side pairs its datagrams with its kernel events on its own (the sender from its send calls, the
    receiver from its socket's queue); on one kernel both must name the same buffer for the same sequence
    number, and every datagram not paired is counted with a reason."""
    out, r = request.getfixturevalue("traced_stream")[1:] if run == "veth" else request.getfixturevalue(
        "loopback_stream")
    assert r.returncode == 0, r.stderr
    paths, points, sent, received = _paths(out)
    for pairing, records in ((paths.sent, sent[sent["t_ns"] >= 0]), (paths.received, received)):
        assert pairing.datagrams == len(records) > 0
        assert pairing.paired + sum(pairing.unpaired.values()) == pairing.datagrams, pairing.unpaired
        assert pairing.paired >= 0.9 * pairing.datagrams, pairing.unpaired
        keys = pairing.paths["point"].astype(np.int64) << 32 | pairing.paths["seq"]
        assert len(np.unique(keys)) == len(keys)  # no datagram paired twice
    s, rcv = paths.sent.paths, paths.received.paths
    # each path's events in the order the datagram met them
    assert (s["engine_ns"] <= s["call_ns"]).all() and (s["call_ns"] <= s["message_ns"]).all()
    assert (s["message_ns"] <= s["queue_ns"]).all() and (s["queue_ns"] <= s["xmit_ns"]).all()
    assert (rcv["receive_ns"] <= rcv["wake_ns"]).all() and (rcv["wake_ns"] <= rcv["return_ns"]).all()
    assert (rcv["return_ns"] <= rcv["engine_ns"]).all()
    # the two sides agree on every datagram both paired: the same buffer under the same sequence number
    by_seq = {(int(p), int(q)): int(a) for p, q, a in zip(s["point"], s["seq"], s["skbaddr"])}
    both = [(by_seq[(int(p), int(q))], int(a)) for p, q, a in zip(rcv["point"], rcv["seq"], rcv["skbaddr"])
            if (int(p), int(q)) in by_seq]
    assert len(both) >= 0.8 * len(received) and all(a == b for a, b in both)
    assert len(paths.same_buffer_ns) == len(both) and (paths.same_buffer_ns >= 0).all()
    # veth and loopback hand a buffer from transmit to the stack within one softirq pass: microseconds
    assert np.median(paths.same_buffer_ns) < 100_000
    assert np.median(rcv["wake_ns"] - rcv["receive_ns"]) < 100_000


