"""``nicrig trace export``: the aligned timeline as a Perfetto trace, read back by independent parsers.

Two readers: the Perfetto project's own message definitions (the ``perfetto`` package's ``Trace``), and
``protoc --decode_raw`` (Google's C++ protobuf parser, no schema), which must see the same packets.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from nicrig.acquisition.hostprobe import events as hp
from nicrig.h5file import open_any

NICRIG = [sys.executable, "-m", "nicrig"]
EXCHANGE = ("import socket\nr = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); r.bind(('127.0.0.1', 0))\n"
            "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
            "for i in range(50):\n    s.sendto(bytes(200), r.getsockname()); r.recv(2000)\n")


def _read(path: Path):
    from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace

    trace = Trace()
    trace.ParseFromString(path.read_bytes())
    return trace


def _slices(trace) -> dict[str, list[tuple[int, int, str]]]:
    """Track name -> (begin ns, end ns, name) of its slices, from begin/end pairs in order (instants: begin = end)."""
    from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import TrackEvent

    names = {p.track_descriptor.uuid: p.track_descriptor.name for p in trace.packet if p.HasField("track_descriptor")}
    open_at: dict[int, tuple[int, str]] = {}
    out: dict[str, list[tuple[int, int, str]]] = {}
    for p in trace.packet:
        if not p.HasField("track_event"):
            continue
        ev = p.track_event
        if ev.type == TrackEvent.TYPE_INSTANT:
            out.setdefault(names[ev.track_uuid], []).append((p.timestamp, p.timestamp, ev.name))
        elif ev.type == TrackEvent.TYPE_SLICE_BEGIN:
            assert ev.track_uuid not in open_at, "a slice began on a track with one still open"
            open_at[ev.track_uuid] = (p.timestamp, ev.name)
        else:
            begin, name = open_at.pop(ev.track_uuid)
            assert p.timestamp >= begin
            out.setdefault(names[ev.track_uuid], []).append((begin, p.timestamp, name))
    assert not open_at
    return out


@pytest.mark.skipif(os.geteuid() != 0, reason="kernel tracing needs root")
def test_host_events_exported_at_their_own_times(tmp_path: Path) -> None:
    h5, out = tmp_path / "t.h5", tmp_path / "t.perfetto-trace"
    r = subprocess.run([*NICRIG, "trace", "record", "-o", str(h5), "--", sys.executable, "-c", EXCHANGE],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([*NICRIG, "trace", "export", str(h5), "-o", str(out)], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    with open_any(h5) as f:
        trace = hp.read(f, "local")
    slices = _slices(_read(out))
    # every NET_RX/other softirq run of the recording is a slice at its kernel time (CLOCK_MONOTONIC ns)
    entries = trace.of("irq:softirq_entry")
    exported = sorted(b for name, rows in slices.items() if name.endswith("softirq") for b, _, _ in rows)
    assert len(exported) > 0 and set(exported) <= set(entries["time_ns"].tolist())
    assert len(exported) >= 0.99 * len(entries)
    polls = [s for name, rows in slices.items() if name.endswith("NAPI poll") for s in rows]
    assert {e for _, e, _ in polls} == set(trace.of("napi:napi_poll")["time_ns"].tolist())
    assert any(name.startswith("poll ") for _, _, name in polls)
    calls = slices["engine system calls"]
    assert any(name == "sendto" for _, _, name in calls)
    if shutil.which("protoc"):
        raw = subprocess.run(["protoc", "--decode_raw"], stdin=out.open("rb"), capture_output=True, timeout=120)
        assert raw.returncode == 0
        top = re.findall(rb"^1 \{$", raw.stdout, flags=re.M)
        assert len(top) == len(_read(out).packet)


def test_decoded_bus_and_frames_exported(tmp_path: Path) -> None:
    cs, out = tmp_path / "fig.h5", tmp_path / "fig.perfetto-trace"
    for argv in (["simulate", "--scenario", "latency", "--nic", "intel-pro1000", "--bus", "pci64-66", "--size",
                  "1400", "--request-size", "64", "--count", "1", "-o", str(cs)], ["decode", str(cs)],
                 ["trace", "export", str(cs), "-o", str(out)]):
        r = subprocess.run([*NICRIG, *argv], capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
    slices = _slices(_read(out))
    with open_any(cs) as f:
        pci = sum(len(f.read_table(f"decoded/{s}/pci")) for s in ("send_pci", "recv_pci"))
    # both buses' transactions, every one a slice (tracks of both sources share the lane's name)
    assert sum(len(rows) for name, rows in slices.items() if name.startswith("PCI transactions")) == pci
    assert any(name.startswith("frames") for name in slices)
    begins = np.array([b for rows in slices.values() for b, _, _ in rows])
    assert begins.min() >= 0
    uuids = [p.track_descriptor.uuid for p in _read(out).packet if p.HasField("track_descriptor")]
    assert len(uuids) == len(set(uuids))
    # progress off a terminal, as every long command: the last line counts every box written
    r = subprocess.run([*NICRIG, "trace", "export", str(cs), "-o", str(out), "--json"], capture_output=True,
                       text=True, timeout=300, env=dict(os.environ, NICRIG_PROGRESS_S="0"))
    assert r.returncode == 0, r.stderr
    boxes = sum(len(rows) for rows in slices.values())
    last = [line for line in r.stderr.splitlines() if line.startswith("nicrig trace export: writing ")][-1]
    assert f": {boxes:,} of {boxes:,} events (100%), " in last, last
