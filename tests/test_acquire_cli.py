"""``nicrig acquire`` and ``nicrig instrument`` as a user runs them: real processes, real sockets, real sigrok-cli."""

from __future__ import annotations

import json
import queue
import re
import signal
import subprocess
import sys
import threading
import time
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
from conftest import as_from_a_shell, udpmon_daemon_on_loopback
from nicrig.acquisition.capture import CaptureSet
from nicrig.acquisition.instruments import rigconfig, session
from sigrok_run import sigrok_cli_available
from siminstr import config, member, serve

from nicrig.errors import NicrigError

needs_sigrok = pytest.mark.skipif(not sigrok_cli_available(), reason="sigrok-cli is not installed")


def nicrig(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "nicrig", *args], capture_output=True, text=True, timeout=timeout)


@contextmanager
def sim_process(*args: str) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """``nicrig instrument sim --port 0 ...`` in its own process; yields its VISA resource string."""
    proc = subprocess.Popen([sys.executable, "-m", "nicrig", "instrument", "sim", "--port", "0", "--count", "8",
                             "--spacing-us", "15", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout], daemon=True).start()  # type: ignore[union-attr]
    try:
        resource, seen = None, []
        while resource is None:
            try:
                line = lines.get(timeout=60)
            except queue.Empty:
                raise AssertionError(f"no 'listening on' line: {seen} {proc.poll()}") from None
            seen.append(line)
            m = re.search(r"listening on (\S+)", line)
            resource = m[1] if m else None
        yield resource, proc
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(10)


def test_a_new_user_s_path_sim_acquire_info_decode_export(tmp_path):
    out = tmp_path / "cap.h5"
    with sim_process("--model", "keysight-msox4000") as (resource, _):
        r = nicrig("acquire", resource, "--probe-map", "pci-control", "--source", "send_pci", "--sample-rate",
                   "266.67MHz", "--record-length", "20000", "--trigger", "FRAME#", "-o", str(out))
        assert r.returncode == 0, r.stderr
        assert "send_pci     complete        20,000/20,000 samples at 266.667 MHz" in r.stdout
        again = nicrig("acquire", resource, "--probe-map", "pci-control", "--sample-rate", "266.67MHz",
                       "--record-length", "20000", "-o", str(out))
        assert again.returncode == 2 and "exists (use another name, or give --force" in again.stderr
        q = nicrig("instrument", "query", resource, ":WAVeform:PREamble?")
        assert q.returncode == 0 and q.stdout.count(",") == 9
    info = json.loads(nicrig("info", str(out), "--json").stdout)
    src = info["sources"][0] if isinstance(info["sources"], list) else info["sources"]["send_pci"]
    assert src["num_samples"] == 20_000 and src["trigger_sample"] == 2_000
    assert nicrig("decode", str(out)).returncode == 0
    with CaptureSet.open(out) as cs:
        assert len(cs.read_table("decoded/send_pci/pci")) > 10
    r = nicrig("export", str(out), "--source", "send_pci", "-o", str(tmp_path / "send.sr"))
    assert r.returncode == 0, r.stderr


@needs_sigrok
def test_the_sigrok_demo_device_gives_what_sigrok_cli_itself_records(tmp_path):
    out = tmp_path / "demo.h5"
    r = nicrig("acquire", "--sigrok-driver", "demo", "--samples", "3000", "--sample-rate", "1MHz", "--source", "demo",
               "-o", str(out))
    assert r.returncode == 0, r.stderr
    direct = tmp_path / "direct.sr"
    subprocess.run(["sigrok-cli", "-d", "demo", "--samples", "3000", "-c", "samplerate=1000000", "-O", "srzip", "-o",
                    str(direct)], check=True, capture_output=True)
    with zipfile.ZipFile(direct) as z:
        want = np.frombuffer(z.read("logic-1-1"), dtype=np.uint8)
    with CaptureSet.open(out) as cs:
        src = cs.source("demo")
        assert src.channels == [f"D{i}" for i in range(8)] and src.samplerate_hz == 1e6
        assert np.array_equal(src.read_packed()[:, 0], want)
        assert src.instrument["model"] == "sigrok" and "demo" in src.instrument["argv"]


@needs_sigrok
def test_a_sigrok_device_through_a_probe_map_with_a_trigger(tmp_path):
    pm = tmp_path / "demo-map.toml"
    pm.write_text('[pod.1]\n0 = "FRAME#"\n1 = "IRDY#"\n3 = "INTA#"\n')
    out = tmp_path / "demo.h5"
    r = nicrig("acquire", "--sigrok-driver", "demo", "--probe-map", str(pm), "--samples", "2000", "--sample-rate",
               "1MHz", "--trigger", "FRAME#:falling", "-o", str(out))
    assert r.returncode == 0, r.stderr
    with CaptureSet.open(out) as cs:
        src = cs.source("logic")
        assert src.channels == ["FRAME#", "IRDY#", "INTA#"] and src.trigger_sample == 0
        frame = src.read_channel("FRAME#")
        assert frame[0] == 0 and src.num_samples > 1000  # the record starts at the falling edge
        assert src.roles == {"frame": "FRAME#", "irdy": "IRDY#", "inta": "INTA#"}


@needs_sigrok
def test_a_missing_sigrok_device_is_a_clear_error():
    r = nicrig("acquire", "--sigrok-driver", "fx2lafw", "--samples", "100", "--sample-rate", "1MHz", "-o",
               "/tmp/never.h5")
    assert r.returncode == 2 and "no sigrok device 'fx2lafw' found" in r.stderr
    assert not Path("/tmp/never.h5").exists()


def test_three_instruments_traffic_while_armed_and_deskew(tmp_path):
    delays = {"send_pci": 0, "recv_pci": 35_000, "probe": -20_000}  # trigger-input delays (ps)
    with serve("keysight-msox4000", "send_pci") as a, \
            serve("rigol-mso5000", "recv_pci", trigger_delay_ps=delays["recv_pci"]) as b, \
            serve("tektronix-mso5", "probe", trigger_delay_ps=delays["probe"]) as c, udpmon_daemon_on_loopback() as port:
        rig = tmp_path / "rig.toml"
        rig.write_text(f'''
description = "three simulated instruments"
timeout_s = 10
deskew_signal = "REF"
[udpmon]
args = ["stream", "127.0.0.1", "--port", "{port}", "--sizes", "256", "--spacing-us", "50", "--count", "100"]
[[instrument]]
source = "send_pci"
resource = "{a.resource}"
probe_map = "pci-control"
sample_rate_hz = {a.dialect.scope.max_rate_hz}
record_length = 10000
trigger = "FRAME#:falling"
[[instrument]]
source = "recv_pci"
resource = "{b.resource}"
model = "rigol-mso5000"
probe_map = "pci-control"
sample_rate_hz = {b.dialect.scope.max_rate_hz}
record_length = 10000
batch_points = 2500
trigger = {{ signal = "TRIG", slope = "rising" }}
[[instrument]]
source = "probe"
resource = "{c.resource}"
probe_map = "gmii-probe"
sample_rate_hz = 500e6
record_length = 20000
trigger = "external:rising"
''')
        out = tmp_path / "rig.h5"
        r = nicrig("acquire", "--config", str(rig), "-o", str(out), "--json")
    assert r.returncode == 0, r.stderr
    result = json.loads(r.stdout)
    assert result["complete"] and [i["status"] for i in result["instruments"]] == ["complete"] * 3
    traffic = result["traffic"]
    assert traffic["exit"] == 0 and traffic["summary"]["points"][0]["received"] == 100
    assert Path(traffic["results"]) == tmp_path / "rig-udpmon.h5" and Path(traffic["results"]).exists()
    offsets = result["deskew"]["offsets_ps"]
    assert result["deskew"]["reference"] == "send_pci" and offsets["send_pci"] == 0
    with CaptureSet.open(out) as cs:
        periods = {n: 1e12 / s.samplerate_hz for n, s in cs.sources.items()}
        # after deskew the REF edge is at the same time in every source, to within a sample of each
        from nicrig.acquisition.instruments.deskew import first_rising_edge

        ref = {n: int(s.times_ps(i, i + 1)[0]) for n, s in cs.sources.items()
               if (i := first_rising_edge(s, "REF")) is not None}
        assert len(ref) == 3 and max(ref.values()) - min(ref.values()) <= max(periods.values())
        # a later trigger input shows as a larger offset: recv_pci's trigger came 35 ns after the probe's -20 ns
        assert abs((offsets["recv_pci"] - offsets["probe"]) - 55_000) <= 2 * max(periods.values())
        table = cs.read_table("acquisition/instruments")
        assert list(table["status"]) == [b"complete"] * 3 and (table["trigger_host_ns"] > 0).all()
        assert list(table["offset_ps"]) == [offsets[n.decode()] for n in table["source"]]


def test_ctrl_c_while_fetching_keeps_what_arrived(tmp_path):
    out = tmp_path / "cut.h5"
    with sim_process("--model", "rigol-mso5000", "--fault", "slow=30@5") as (resource, _):
        proc = subprocess.Popen([sys.executable, "-m", "nicrig", "acquire", resource, "--probe-map", "pci-control",
                                 "--source", "send_pci", "--sample-rate", "266.67MHz", "--record-length", "10000",
                                 "--batch-points", "1000", "--trigger", "FRAME#", "--io-timeout", "60", "-o", str(out)],
                                stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True, preexec_fn=as_from_a_shell)
        deadline = time.monotonic() + 120
        while True:  # the 5th block (batch 3, pod 1) hangs: 2 batches are in by then
            try:
                with CaptureSet.open(out, swmr=True) as cs:
                    if cs.source("send_pci").num_samples >= 2000:
                        break
            except NicrigError:
                pass  # not there yet, or not yet in SWMR mode
            assert proc.poll() is None and time.monotonic() < deadline, "acquire never had its 2 batches in"
            time.sleep(0.1)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert "interrupted" in err and "missing send_pci: 2,000 of 10,000 samples" in err
    with CaptureSet.open(out) as cs:
        assert cs.source("send_pci").num_samples == 2000
        assert cs.notes.startswith("INCOMPLETE: interrupted (Ctrl-C)")
        assert cs.read_table("acquisition/instruments")["status"][0] == b"interrupted"


#: A reader in its own process, as users' readers are (HDFView, h5py, the GUI): it follows ``argv[1]``'s
#: send_pci source until ``argv[2]`` exists and prints the sample counts it saw, one a line, after "ready". (In the
#: writer's own process HDF5 would share the open file with the writer, and a read open at the
#: writer's close would keep the file marked as open for writing.)
READER = """
import sys, time
from pathlib import Path
from nicrig.acquisition.capture import CaptureSet
from nicrig.errors import NicrigError
out, done = Path(sys.argv[1]), Path(sys.argv[2])
print("ready", flush=True)
while not done.exists():
    if out.exists():
        try:
            with CaptureSet.open(out, swmr=True) as cs:
                src = cs.source("send_pci")
                src.refresh()
                print(src.num_samples, flush=True)
        except NicrigError:
            pass  # created, but not yet in SWMR mode (HDF5 keeps it locked until then)
    time.sleep(0.05)
"""


def test_a_reader_watches_the_capture_grow(tmp_path):
    out, done = tmp_path / "grow.h5", tmp_path / "done"
    with serve("tektronix-mso5", faults=[f"slow=0.3@{n}" for n in range(2, 9)]) as srv:
        m = member(config(srv, batch_points=1000))
        session.prepare([m])
        reader = subprocess.Popen([sys.executable, "-c", READER, str(out), str(done)], stdout=subprocess.PIPE,
                                  text=True)
        try:
            assert reader.stdout.readline() == "ready\n"  # its imports done before the capture starts
            session.run([m], out, timeout_s=5)
        finally:
            done.touch()
            seen, _ = reader.communicate(timeout=120)
    assert m.status == "complete" and reader.returncode == 0
    growing = sorted({int(n) for n in seen.split()})
    assert len([n for n in growing if 0 < n < 10_000]) >= 2, growing
    with CaptureSet.open(out) as cs:  # closed by its writer: a plain read-only open works
        assert cs.source("send_pci").num_samples == 10_000


@pytest.mark.parametrize("args, message", [
    (["-o", "x.h5"], "name the instruments one way"),
    (["TCPIP0::127.0.0.1::1::SOCKET", "--config", "rig.toml", "-o", "x.h5"], "name the instruments one way"),
    (["TCPIP0::127.0.0.1::1::SOCKET", "-o", "x.h5"], "give --sample-rate and --record-length"),
    (["TCPIP0::127.0.0.1::1::SOCKET", "--sample-rate", "1MHz", "--samples", "100", "-o", "x.h5"],
     "needs a probe map"),
    (["--sigrok-driver", "demo", "--sample-rate", "fast", "--samples", "100", "-o", "x.h5"], "bad sample rate"),
    (["--sigrok-driver", "demo", "--sample-rate", "1MHz", "--samples", "100", "--trigger", "X:sideways", "-o", "x.h5"],
     "SIGNAL\\[:falling\\|rising\\|either\\]"),
    (["--sigrok-driver", "demo", "--sample-rate", "1MHz", "--samples", "100", "--udpmon", "serve", "-o", "x.h5"],
     "starts with latency or stream"),
])
def test_usage_errors(tmp_path, args, message):
    r = subprocess.run([sys.executable, "-m", "nicrig", "acquire", *args], capture_output=True, text=True,
                       cwd=tmp_path)
    assert r.returncode == 2 and re.search(message, r.stderr), r.stderr
    assert not (tmp_path / "x.h5").exists()


def test_config_options_belong_in_the_config(tmp_path):
    rig = tmp_path / "rig.toml"
    rig.write_text('[[instrument]]\nsource = "a"\nsigrok_driver = "demo"\nsample_rate_hz = 1e6\nrecord_length = 10\n')
    r = nicrig("acquire", "--config", str(rig), "--sample-rate", "2MHz", "-o", str(tmp_path / "x.h5"))
    assert r.returncode == 2 and "--sample-rate: set per instrument in" in r.stderr


def test_instrument_models_lists_drivers_sims_and_probe_maps():
    r = nicrig("instrument", "models")
    assert r.returncode == 0
    for word in ("keysight-msox4000", "rigol-mso5000", "tektronix-mso5", "pci-control", "gmii-probe", "sigrok"):
        assert word in r.stdout


def test_instrument_deskew_measures_applies_and_saves(tmp_path):
    out = tmp_path / "two.h5"
    with serve("keysight-msox4000") as a, serve("tektronix-mso5", "recv_pci", trigger_delay_ps=40_000) as b:
        members = [member(config(a)),
                   member(config(b, "recv_pci", trigger=rigconfig.parse_trigger("external:rising")))]
        session.prepare(members)
        session.run(members, out, timeout_s=5)
    cal = tmp_path / "cal.toml"
    r = nicrig("instrument", "deskew", str(out), "--reference", "send_pci", "--save", str(cal), "--json")
    assert r.returncode == 0, r.stderr
    offsets = json.loads(r.stdout)["offsets_ps"]
    assert offsets["send_pci"] == 0 and 40_000 + 5_000 < offsets["recv_pci"] < 40_000 + 20_000
    with CaptureSet.open(out) as cs:
        assert cs.source("recv_pci").offset_ps == offsets["recv_pci"]
    from nicrig.acquisition.instruments import deskew

    assert deskew.load(cal) == offsets
    r = nicrig("instrument", "deskew", str(out), "--signal", "NOPE")
    assert r.returncode == 2 and "no source has a rising edge of 'NOPE'" in r.stderr


def test_sim_refuses_bad_options():
    r = nicrig("instrument", "sim", "--model", "keysight-msox4000", "--port", "0", "--fault", "meltdown")
    assert r.returncode == 2 and "fault 'meltdown'" in r.stderr
    r = nicrig("instrument", "sim", "--source", "probe", "--probe-map", "pci-control", "--port", "0")
    assert r.returncode == 2 and "does not have" in r.stderr
