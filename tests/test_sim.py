"""The simulated rig: seed 002's observations, protocol invariants on every clock, bad input.

Observations are measured from the recorded signals where the signals show
them (TX_EN spans, FRAME#/IRDY# occupancy), and from the ground-truth tables
where they need the model's bookkeeping (which transaction moved which frame).
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
import zlib
from pathlib import Path

import numpy as np
import pytest
from conftest import as_from_a_shell, run_unprivileged
from conftest import simulate_set as _sim
from nicrig.acquisition.capture import CaptureSet, unpack_bits
from nicrig.acquisition.sim import profiles
from nicrig.acquisition.sim.rig import Recording
from pcirules import check  # tests/pcirules.py

from nicrig.errors import UsageError

US = 1_000_000  # ps


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("sim")


@pytest.fixture(scope="module")
def intel_stream(work) -> Path:
    """Intel PRO/1000 on 64/66, 1400-byte packets every 11 us: long enough for flow control to cycle."""
    return _sim(work, "intel_stream", kind="stream", size_bytes=1400, spacing_us=11, count=3000)


@pytest.fixture(scope="module")
def intel_pausing(work) -> Path:
    """Intel PRO/1000 on 64/66 at 11 us, its receiver given 8 descriptors, fewer than one receive timer's frames
    (~10): its FIFO fills between two services and it pauses its partner."""
    values = profiles.raw("nic", "intel-pro1000")
    values.update(name="intel-8-descriptors", rx_ring=8)
    nic = work / "intel-8-descriptors.toml"
    nic.write_text(profiles.to_toml(values), encoding="utf-8")
    return _sim(work, "intel_pausing", nic=str(nic), kind="stream", size_bytes=1400, spacing_us=11, count=1500)


@pytest.fixture(scope="module")
def intel_latency(work) -> Path:
    return _sim(work, "intel_latency", kind="latency", size_bytes=1400, count=4)


def _spans(level_low: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Start and end (exclusive) indices of runs where ``level_low`` is True."""
    d = np.diff(np.concatenate(([0], level_low.astype(np.int8), [0])))
    return np.flatnonzero(d == 1), np.flatnonzero(d == -1)


def _channel(src, name: str) -> np.ndarray:
    return src.read_channel(name)


def test_frame_occupies_the_wire_11_6_to_11_7_us(intel_stream):
    """Seed 002 4.1.3: a 1400-byte packet's frame is on the medium for 11.6 us (11.7 us with the gap)."""
    with CaptureSet.open(intel_stream) as cs:
        probe = cs.source("probe")
        en = _channel(probe, "TX_EN")[: 2_000_000].astype(bool)
        t = probe.times_ps(0, len(en))
    starts, ends = _spans(en)
    whole = ends < len(en)  # the window may cut the last frame
    starts, ends = starts[whole], ends[whole]
    durations_us = (t[ends - 1] - t[starts] + 8000) / US
    data_frames = durations_us[durations_us > 5]
    assert len(data_frames) > 100
    assert np.all((data_frames >= 11.6) & (data_frames <= 11.7))


def test_dma_of_1400_bytes_takes_about_3_us_on_64_66(work):
    """Seed 002 4.1.3: the SK-9843 moves the frame over the 64/66 bus in ~3 us."""
    path = _sim(work, "sk_64_66", nic="sk9843", bus="pci64-66", kind="stream", size_bytes=1400,
                spacing_us=20, count=200)
    with CaptureSet.open(path) as cs:
        tx = cs.read_table("truth/send_pci/transactions")
    data = tx[tx["purpose"] == b"tx_data"]
    # Bursts of one frame follow each other closely; frames are >= 11 us apart.
    gaps = np.diff(data["t_start_ps"])
    frame_starts = np.concatenate(([0], np.flatnonzero(gaps > 5 * US) + 1))
    frame_ends = np.concatenate((frame_starts[1:], [len(data)])) - 1
    durations_us = (data["t_end_ps"][frame_ends] - data["t_start_ps"][frame_starts]) / US
    assert len(durations_us) == 200
    assert 2.7 <= np.median(durations_us) <= 3.3


def test_intel_coalescence_delays_csr_update_by_about_70_us(intel_latency):
    """Seed 002 4.2.3: ~70 us between the PCI transfer and the CSR update, on send and on receive."""
    with CaptureSet.open(intel_latency) as cs:
        for bus, purpose in (("recv_pci", b"rx_data"), ("send_pci", b"tx_data")):
            t = cs.read_table(f"truth/{bus}/transactions")
            first_request_dma = t[t["purpose"] == purpose][0]
            later_csr = t[(t["kind"] == b"csr") & (t["t_start_ps"] > first_request_dma["t_end_ps"])]
            delay_us = (later_csr[0]["t_start_ps"] - first_request_dma["t_end_ps"]) / US
            assert 65 <= delay_us <= 75, (bus, delay_us)


def test_a_receiver_out_of_descriptors_pauses_its_partner_in_regular_gaps(intel_pausing):
    """Seed 002 4.2.3 / figure 4.9's mechanism: with 11 us spacing, regular transmission gaps, PAUSE frames from
    the receiver, the sender stopping after each XOFF."""
    with CaptureSet.open(intel_pausing) as cs:
        frames = cs.read_table("truth/probe/frames")
        probe = cs.source("probe")
        rx_dv = _channel(probe, "RX_DV").astype(bool)
        rxd = probe.read_vector("RXD")
        tx_en = _channel(probe, "TX_EN").astype(bool)
        t = probe.times_ps()
    xoff = frames[(frames["kind"] == b"pause") & (frames["pause_quanta"] > 0)]
    assert len(xoff) >= 4
    period_us = np.diff(xoff["t_start_ps"]) / US
    assert np.std(period_us[1:]) < 0.1 * np.median(period_us)
    # The PAUSE frames are on the wire, B -> A: 01-80-C2-00-00-01 after the SFD.
    s, _ = _spans(rx_dv)
    dsts = {bytes(rxd[i + 8:i + 14].astype(np.uint8)).hex() for i in s}
    assert "0180c2000001" in dsts
    # And the sender's transmissions stop after each XOFF: gaps well above the 11.7 us frame period.
    starts, _ = _spans(tx_en)
    gaps_us = np.diff(t[starts]) / US
    assert (gaps_us > 30).sum() >= len(xoff) - 1


def test_a_receiver_on_a_slower_bus_than_the_wire_pauses_its_partner(work, capsys):
    """A receiving NIC in a 32-bit 33 MHz slot moves a 1400-byte frame over its bus slower than the wire brings
    the next (Hughes-Jones et al. 2003, §9: such a bus is almost fully occupied at wire speed): its FIFO passes
    the high-water mark and it sends XOFF; the same stream into a 64-bit 66 MHz slot is not paused."""
    from nicrig.cli import main

    pauses = {}
    for recv_bus in ("pci32-33", "pci64-66"):
        out = work / f"recv-{recv_bus}.h5"
        assert main(["simulate", "--scenario", "stream", "--nic", "intel-pro1000", "--bus", "pci64-66",
                     "--recv-bus", recv_bus, "--size", "1400", "--spacing-us", "11", "--count", "300",
                     "--rounds", "1", "--json", "-o", str(out)]) == 0
        summary = json.loads(capsys.readouterr().out)
        # Paused, the 32/33 receiver keeps every datagram; the 64/66 one loses them in its socket buffer instead.
        assert summary["packets_lost"] == summary["counters"]["recv_udp_rcvbuf_errors"]
        assert (summary["packets_lost"] == 0) == (recv_bus == "pci32-33")
        pauses[recv_bus] = summary["counters"]["recv_pause_sent"]
        with CaptureSet.open(out) as cs:
            simulation = json.loads(cs.attrs["simulation"])
            assert simulation["bus"]["name"] == "pci64-66"
            assert simulation.get("recv_bus", simulation["bus"])["name"] == recv_bus  # written only when it differs
            periods = {name: int(np.median(np.diff(cs.source(name).times_ps(0, 1000))))
                       for name in ("send_pci", "recv_pci")}
        assert periods == {"send_pci": 15_000, "recv_pci": 15_000 if recv_bus == "pci64-66" else 30_000}
    assert pauses["pci32-33"] >= 2 and pauses["pci64-66"] == 0


def _occupancy(src, c0: int, c1: int) -> float:
    frame = src.read_channel("FRAME#", c0, c1)
    irdy = src.read_channel("IRDY#", c0, c1)
    return float(np.mean((frame == 0) | (irdy == 0)))


def test_pci32_33_is_nearly_saturated_at_wire_speed(work):
    """Seed 002 9: a 32-bit 33 MHz bus has almost 100% occupancy at gigabit wire speed; 64/66 does not.

    Occupancy counts clocks with FRAME# or IRDY# asserted; what remains idle on
    32/33 are the turnaround clocks and the REQ# pause a master must take after
    each host-bridge disconnect (PCI 3.0 3.4.1).
    """
    occupancy = {}
    for bus in ("pci32-33", "pci64-66"):
        path = _sim(work, f"sk_{bus}", nic="sk9843", bus=bus, kind="stream", size_bytes=1400,
                    spacing_us=10, count=300)
        with CaptureSet.open(path) as cs:
            send = cs.source("send_pci")
            n = send.num_samples
            occupancy[bus] = _occupancy(send, n // 4, n // 2)
    assert occupancy["pci32-33"] >= 0.85
    assert occupancy["pci64-66"] <= 0.6


def test_pci64_66_leaves_the_bus_mostly_free(intel_stream):
    """Seed 002 4.2.3: Intel on 64/66 at 11 us spacing uses the sending bus ~43%, the receiving bus ~30%."""
    with CaptureSet.open(intel_stream) as cs:
        send, recv = cs.source("send_pci"), cs.source("recv_pci")
        n = min(send.num_samples, 400_000)
        assert 0.3 <= _occupancy(send, 0, n) <= 0.6
        assert 0.2 <= _occupancy(recv, 0, n) <= 0.45


def test_every_clock_obeys_the_pci_protocol_and_every_frame_its_fcs(work):
    path = _sim(work, "invariants", nic="sk9843", bus="pci64-66", kind="latency", size_bytes=3000, count=3,
                recording=Recording(with_ad=True))
    with CaptureSet.open(path) as cs:
        for name in ("send_pci", "recv_pci"):
            src = cs.source(name)
            bits = unpack_bits(src.read_packed(), len(src.channels))
            signals = {ch: bits[:, i] for i, ch in enumerate(src.channels)}
            assert check(signals) == []
        probe = cs.source("probe")
        frames_checked = 0
        for en_name, d_name in (("TX_EN", "TXD"), ("RX_DV", "RXD")):
            en = probe.read_channel(en_name).astype(bool)
            d = probe.read_vector(d_name).astype(np.uint8)
            for s, e in zip(*_spans(en)):
                octets = bytes(d[s:e])
                assert octets[:8] == b"\x55" * 7 + b"\xd5"
                assert zlib.crc32(octets[8:]) == 0x2144DF1C  # CRC-32 residue of a good frame
                frames_checked += 1
        assert frames_checked >= 3 * (1 + 3)  # requests + 3-fragment responses


def test_multi_frame_responses_are_fragmented(work):
    path = _sim(work, "frag", nic="generic", kind="latency", size_bytes=3000, count=2)
    with CaptureSet.open(path) as cs:
        packets = cs.read_table("truth/packets")
    responses = packets[packets["kind"] == b"response"]
    assert list(responses["frames"]) == [3, 3]
    assert np.all(responses["t_app_recv_ps"] > responses["t_app_send_ps"])


def test_coalescence_sets_the_latency_intercept(work):
    """Seed 002 4.1.1 vs 4.2.1: per-frame interrupts give ~60 us RTT, Intel's coalescence ~170 us."""
    rtts = {}
    for nic in ("sk9843", "intel-pro1000"):
        path = _sim(work, f"rtt_{nic}", nic=nic, kind="latency", size_bytes=64, count=3)
        with CaptureSet.open(path) as cs:
            p = cs.read_table("truth/packets")
        req, resp = p[p["kind"] == b"request"], p[p["kind"] == b"response"]
        rtts[nic] = np.median(resp["t_app_recv_ps"] - req["t_app_send_ps"]) / US
    assert 35 <= rtts["sk9843"] <= 80
    assert 140 <= rtts["intel-pro1000"] <= 200


def test_common_timeline_starts_at_the_first_frame_on_the_send_bus(intel_latency):
    with CaptureSet.open(intel_latency) as cs:
        send = cs.source("send_pci")
        first = cs.read_table("truth/send_pci/transactions")[0]
        assert send.times_ps(send.trigger_sample, send.trigger_sample + 1)[0] == 0
        assert first["t_start_ps"] == 0
        frame = send.read_channel("FRAME#", send.trigger_sample, send.trigger_sample + 1)
        assert frame[0] == 0
        assert send.role("frame") == "FRAME#" and send.bus["kind"] == "pci"
        assert cs.source("probe").role("txd") == "TXD"


def test_timing_mode_has_a_clock_and_the_same_bus_values(work):
    k = 4
    state = _sim(work, "st", kind="latency", size_bytes=200, count=1, nic="generic")
    timing = _sim(work, "tm", kind="latency", size_bytes=200, count=1, nic="generic",
                  recording=Recording(samples_per_clock=k))
    with CaptureSet.open(state) as a, CaptureSet.open(timing) as b:
        s, t = a.source("send_pci"), b.source("send_pci")
        assert t.mode == "timing" and "CLK" in t.channels
        clk = t.read_channel("CLK")
        rising = np.flatnonzero((clk[1:] == 1) & (clk[:-1] == 0)) + 1
        frame_at_edges = t.read_channel("FRAME#")[rising]
        frame_state = s.read_channel("FRAME#")
        n = min(len(frame_at_edges), len(frame_state) - 1)
        assert np.array_equal(frame_at_edges[:n], frame_state[rising[:n] // k])


@pytest.mark.parametrize("argv, message", [
    (["--nic", "no-such-nic"], "unknown nic profile"),
    (["--bus", "pci128-200"], "unknown bus profile"),
    (["--spacing-us", "-1"], "spacing"),
    (["--size", "65508"], "65507"),
    (["--count", "0"], "count"),
])
def test_bad_parameters_give_one_clear_line_and_exit_2(tmp_path, argv, message):
    out = tmp_path / "x.h5"
    r = subprocess.run([sys.executable, "-m", "nicrig", "simulate", *argv, "-o", str(out)],
                       capture_output=True, text=True)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("nicrig: error:") and message in lines[0]
    assert list(tmp_path.iterdir()) == []


def test_unwritable_output_is_refused_without_leftovers(read_only_folder):
    r = run_unprivileged([sys.executable, "-m", "nicrig", "simulate", "--count", "1",
                          "-o", str(read_only_folder / "x.h5")])
    assert r.returncode == 2 and "not writable" in r.stderr, r.stderr
    assert list(read_only_folder.iterdir()) == []


def test_output_in_missing_folder_is_refused(tmp_path):
    r = subprocess.run([sys.executable, "-m", "nicrig", "simulate", "--count", "1",
                        "-o", str(tmp_path / "nope" / "x.h5")], capture_output=True, text=True)
    assert r.returncode == 2 and "does not exist" in r.stderr


def test_failed_simulation_leaves_nothing_behind(tmp_path, monkeypatch):
    from nicrig.acquisition.sim import rig

    def boom(*a, **k):
        raise RuntimeError("model failure")

    monkeypatch.setattr(rig._Sources, "render", boom)
    with pytest.raises(RuntimeError):
        _sim(tmp_path, "fail", kind="latency", size_bytes=64, count=1)
    assert list(tmp_path.iterdir()) == []


def test_every_builtin_profile_loads_and_a_bad_one_is_explained(tmp_path):
    for kind in ("bus", "nic", "host"):
        for name in profiles.available(kind):
            profiles.load(kind, name)
    bad = tmp_path / "bad.toml"
    bad.write_text('name = "x"\n')
    with pytest.raises(UsageError, match="missing field"):
        profiles.load("bus", str(bad))
    bad.write_text("name = \n")
    with pytest.raises(UsageError, match="not valid TOML"):
        profiles.load("nic", str(bad))


def test_a_service_access_tagged_with_a_cause_is_made_only_for_it_and_a_bad_tag_is_explained():
    sk = profiles.load("nic", "sk9843")
    assert sk.isr_exit_for(rx=True, tx=False) == ("w:0x0434", "r:0x0008", "w:0x000c")
    assert sk.isr_exit_for(rx=False, tx=True) == ("w:0x06b4", "r:0x0008", "w:0x000c")
    assert sk.isr_exit_for(rx=True, tx=True) == ("w:0x0434", "w:0x06b4", "r:0x0008", "w:0x000c")
    assert sk.isr_exit_for(rx=False, tx=False) == ("r:0x0008", "w:0x000c")
    # untagged, every service makes them all
    e1000 = profiles.load("nic", "intel-pro1000")
    assert {e1000.isr_exit_for(rx, tx) for rx in (False, True) for tx in (False, True)} == {e1000.isr_exit_csr}
    for field, value, error in (("isr_exit_csr", ("w:0x0434@rc",), "'@rx' or '@tx'"),
                                ("tx_csr", ("w:0x06b4@tx",), "only an access of isr_exit_csr"),
                                ("isr_exit_csr", ("w:0x04zz",), "no register offset")):
        with pytest.raises(UsageError, match=error):
            dataclasses.replace(sk, **{field: value}).check()


def test_cli_writes_a_capture_set_and_prints_json(tmp_path):
    out = tmp_path / "s.h5"
    r = subprocess.run([sys.executable, "-m", "nicrig", "simulate", "--scenario", "stream", "--nic", "intel-pro1000",
                        "--bus", "pci64-66", "--size", "1400", "--spacing-us", "11", "--count", "20",
                        "-o", str(out), "--json"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    import json

    summary = json.loads(r.stdout)
    assert summary["frames"] >= 20 and set(summary["sources"]) == {"send_pci", "recv_pci", "probe"}
    assert summary["packets_lost"] == 0


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("failing", ["probe", "send_pci"])
def test_a_source_that_fails_fails_the_run_and_leaves_no_file(failing, workers, tmp_path, monkeypatch):
    """A source that fails to render, here or in a forked worker: its error is the run's, and the capture
    set is not left half written."""
    from nicrig.acquisition.sim import rig

    render = rig._Sources.render

    def full_disk(self, name, *args, **kwargs):
        if name == failing:
            raise OSError(28, "No space left on device")
        return render(self, name, *args, **kwargs)

    monkeypatch.setattr(rig._Sources, "render", full_disk)
    with pytest.raises(OSError, match="No space left"):
        _sim(tmp_path, "broken", kind="stream", size_bytes=1400, spacing_us=11, count=40, seed=2, workers=workers)
    assert list(tmp_path.iterdir()) == []


def _children(pid: int) -> list[int]:
    return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def _catches(pid: int, signum: int) -> bool:
    """Whether process ``pid`` has a handler of its own for ``signum`` (``SigCgt`` in /proc/PID/status, a hex mask
    with bit ``signum - 1`` for each signal; proc(5))."""
    caught = next(line for line in Path(f"/proc/{pid}/status").read_text().splitlines() if line.startswith("SigCgt:"))
    return bool(int(caught.split()[1], 16) >> (signum - 1) & 1)


def _group(pgid: int) -> str:
    return subprocess.run(["ps", "-o", "pid,ppid,stat,cmd", "-g", str(pgid)], capture_output=True, text=True).stdout


@pytest.mark.skipif(not Path(f"/proc/{os.getpid()}/task/{os.getpid()}/children").exists(),
                    reason="needs Linux's /proc/PID/task/TID/children to see the workers")
@pytest.mark.parametrize("stop", ["ctrl-c", "sigterm"])
def test_stopped_while_workers_render_it_stops_them_all_and_leaves_nothing(stop, tmp_path):
    """Ctrl-C reaches the terminal's whole process group, the simulation and its forked workers: the
    workers leave it to the simulation, which stops them, removes their results and the unfinished
    capture set, and exits 130. SIGTERM (``kill``, ``timeout``, a job scheduler) reaches the simulation
    alone: the same (nicrig.interrupts)."""
    out, scratch = tmp_path / "out", tmp_path / "tmp"
    out.mkdir()
    scratch.mkdir()

    def own_group() -> None:
        as_from_a_shell()
        os.setpgid(0, 0)  # as a shell puts a job in a process group of its own

    proc = subprocess.Popen([sys.executable, "-m", "nicrig", "simulate", "--scenario", "stream", "--size", "1400",
                             "--spacing-us", "11", "--count", "200000", "--rounds", "1", "--capture-count", "0",
                             "-o", str(out / "long.h5")], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=own_group, env={**os.environ, "TMPDIR": str(scratch)})
    try:
        # The model has handed blocks to a worker, and SIGTERM is simulate's to handle: importing h5py runs
        # ``uname -p`` (platform.uname), a child that appears before simulate takes SIGTERM over.
        while not (_children(proc.pid) and _catches(proc.pid, signal.SIGTERM)):
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.05)
        if stop == "ctrl-c":
            os.killpg(proc.pid, signal.SIGINT)
        else:
            proc.terminate()
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130 and "nicrig: interrupted" in err, err
    for _ in range(200):  # no worker outlived it (once init has taken any zombie it left)
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        pytest.fail(f"processes of the simulation's group are still there: {_group(proc.pid)}")
    assert list(out.iterdir()) == [] and list(scratch.iterdir()) == []


def test_workers_option_gives_the_same_capture_and_refuses_a_negative_count(tmp_path):
    """``--workers 1`` (everything in simulate's own process) and ``--workers 2`` (forked workers while the
    model runs): the same samples, timestamps and tables; ``--workers -1`` is a usage error."""
    from test_sim_stable import digest

    digests = []
    for workers in ("1", "2"):
        out = tmp_path / f"w{workers}.h5"
        r = subprocess.run([sys.executable, "-m", "nicrig", "simulate", "--count", "300", "--rounds", "1",
                            "--spacing-us", "11", "--capture-count", "0", "--workers", workers, "-o", str(out)],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        digests.append(digest(out))
    assert digests[0] == digests[1]
    r = subprocess.run([sys.executable, "-m", "nicrig", "simulate", "--workers", "-1", "-o", str(tmp_path / "x.h5")],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "--workers -1" in r.stderr and not (tmp_path / "x.h5").exists()


def test_checkpoints_need_an_interval():
    from nicrig.acquisition.sim.model import Rig, Scenario

    rig = Rig(Scenario(kind="latency", size_bytes=64, count=1), profiles.load("bus", "pci64-66"),
              profiles.load("nic", "intel-pro1000"), profiles.load("host", "supermicro-370dle"))
    with pytest.raises(ValueError, match="positive interval"):
        rig.run(checkpoint=lambda t_ps: None)


@pytest.mark.parametrize("wide_every", [0, 7, 1000])
def test_a_block_rendered_from_its_window_is_the_block_of_the_whole_bus(wide_every):
    """A 64-bit bus whose 64-bit transfers are rare, or absent (a 32-bit card in a 64-bit slot): each block
    rendered from the transactions :func:`rig._pci_window` picks equals that block of the whole bus rendered
    at once, AD[63:32] holding the last 64-bit transfer's value however long ago."""
    from nicrig.acquisition.sim import rig
    from nicrig.acquisition.sim.model import BusRecord
    from nicrig.acquisition.sim.pci_bus import PciRenderer, PciTransaction

    bus = BusRecord(profiles.load("bus", "pci64-66"), 0)
    for k in range(300):
        wide = bool(wide_every) and k % wide_every == 3
        n = 1 + k % 3
        if wide:
            bus.wide.append(len(bus.transactions))
        bus.transactions.append(PciTransaction(
            start_clk=5 + 13 * k, command=0x7, address=0x1000 + 64 * k, wide=wide, master="nic" if k % 2 else "host",
            data=np.array([(k << 40) + (j << 32) + 0xA5A5_0000 + j for j in range(n)], np.uint64),
            byte_enables=np.full(n, 0xFF if wide else 0xF, np.uint8)))
    clocks = 5 + 13 * 300
    whole = PciRenderer(bus.transactions, width_bits=64, with_ad=True).render(0, clocks)
    for c0 in range(0, clocks, 256):
        c1 = min(clocks, c0 + 256)
        window = PciRenderer(bus.transactions[rig._pci_window(bus, c0, c1)], width_bits=64, with_ad=True)
        assert np.array_equal(window.render(c0, c1), whole[c0:c1]), (c0, c1)
