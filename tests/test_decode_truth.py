"""Every decoder, run by the real sigrok-cli, against the simulated rig's ground truth.

Two paths are checked against the truth tables: ``.sr`` files exported with
``nicrig export`` and decoded by ``sigrok-cli -B <decoder>=records`` (what a
user does by hand), and ``nicrig decode`` (which streams samples to
sigrok-cli). Transaction for transaction and frame for frame.
"""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import simulate_set
from nicrig.acquisition.capture import CaptureSet
from nicrig.acquisition.sim import profiles
from nicrig.acquisition.sim.rig import Recording
from nicrig.decoders import DECODERS_DIR, spec
from nicrig.decoders.sigrok_cli import _command
from scapy.all import rdpcap

pytestmark = [pytest.mark.sigrok,
              pytest.mark.skipif(shutil.which("sigrok-cli") is None, reason="sigrok-cli is not installed")]

DEVSEL = {1: "fast", 2: "medium", 3: "slow", 4: "subtractive", 0: "none"}
HERE = Path(__file__).parent


def nicrig(*args: str) -> subprocess.CompletedProcess[str]:
    r = subprocess.run([sys.executable, "-m", "nicrig", *args], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return r


def _sim(tmp: Path, name: str, nic: str, bus: str, recording: Recording = Recording(with_ad=True),
         **scenario) -> Path:
    """These tests decode AD and C/BE# by default: addresses and byte counts are compared too."""
    return simulate_set(tmp, name, nic=nic, bus=bus, recording=recording, **scenario)


@pytest.fixture(scope="module")
def tmp(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("truth")


@pytest.fixture(scope="module")
def sk_stream(tmp) -> Path:
    """SK-9843 on 32/33: STOP# retries on CSR writes, host-bridge disconnects on every DMA."""
    return _sim(tmp, "sk", "sk9843", "pci32-33", kind="stream", size_bytes=1000, spacing_us=15, count=12)


@pytest.fixture(scope="module")
def intel_latency(tmp) -> Path:
    """Intel on 64/66: coalesced interrupts, 64-bit DMA, 3-fragment responses."""
    return _sim(tmp, "intel", "intel-pro1000", "pci64-66", kind="latency", size_bytes=3000, count=3)


@pytest.fixture(scope="module")
def pause_stream(tmp) -> Path:
    """An Intel profile with a short receive ring, so flow control starts within the first millisecond."""
    base = (Path(profiles.__file__).parents[2] / "data" / "profiles" / "nic" / "intel-pro1000.toml").read_text()
    nic = tmp / "intel-short-ring.toml"
    nic.write_text(base.replace("rx_ring = 80", "rx_ring = 4").replace('name = "intel-pro1000"',
                                                                        'name = "intel-short-ring"'))
    return _sim(tmp, "pause", str(nic), "pci64-66", recording=Recording(), kind="stream", size_bytes=1400,
                spacing_us=11, count=250)


def _sigrok_records(sr: Path, source, stack) -> list[dict]:
    """sigrok-cli on an exported .sr file, channels mapped by the names in the file."""
    env = dict(os.environ, SIGROKDECODE_DIR=str(DECODERS_DIR))
    r = subprocess.run(["sigrok-cli", "-i", str(sr), "-P", stack.text(), "-B", f"{stack.output}=records"],
                       capture_output=True, env=env)
    assert r.returncode == 0 and b"Traceback" not in r.stderr, r.stderr.decode()
    return sorted((json.loads(line) for line in r.stdout.splitlines()), key=lambda x: x["ss"])


def _both_paths(path: Path, source_name: str, output: str) -> list[dict]:
    """Records of ``output`` from an exported .sr through sigrok-cli, checked equal to nicrig decode's table."""
    sr = path.with_suffix(f".{source_name}.sr")
    nicrig("export", str(path), "--source", source_name, "-o", str(sr))
    with CaptureSet.open(path) as cs:
        source = cs.source(source_name)
        records = []
        for stack in spec.auto_stacks(source):
            if stack.output == output:
                records += _sigrok_records(sr, source, stack)
    records.sort(key=lambda r: r["ss"])
    tables = {}
    for engine in ("builtin", "sigrok"):
        nicrig("decode", str(path), "--source", source_name, "--engine", engine, "--force")
        with CaptureSet.open(path) as cs:
            tables[engine] = cs.read_table(f"decoded/{source_name}/{output}")
        assert list(tables[engine]["ss"]) == [r["ss"] for r in records], engine
        assert list(tables[engine]["es"]) == [r["es"] for r in records], engine
    assert tables["builtin"].tobytes() == tables["sigrok"].tobytes()
    return records


def _check_pci(path: Path, source_name: str) -> np.ndarray:
    records = _both_paths(path, source_name, "pci")
    with CaptureSet.open(path) as cs:
        truth = cs.read_table(f"truth/{source_name}/transactions")
    assert len(records) == len(truth)
    for rec, t in zip(records, truth):
        where = f"{source_name} transaction at clock {t['ss']}"
        assert (rec["ss"], rec["es"]) == (t["ss"], t["es"]), where
        assert rec["command_code"] == t["command"], where
        assert rec["command"] == t["command_name"].decode(), where
        assert rec["address"] == t["address"] and rec["dac"] == t["dac"], where
        assert (rec["data_phases"], rec["bytes"]) == (t["data_phases"], t["bytes"]), where
        assert rec["termination"] == t["termination"].decode(), where
        assert rec["kind"] == t["kind"].decode(), where
        assert rec["devsel"] == DEVSEL[int(t["devsel"])], where
        assert (rec["master_wait_clocks"], rec["target_wait_clocks"]) == \
            (t["master_wait_clocks"], t["target_wait_clocks"]), where
        assert rec["wide"] == t["wide"] and rec["stop"] == t["stop_asserted"], where
        assert rec["parity_error"] == t["parity_error"], where
    return truth


def test_pci_decoder_matches_truth_with_retries_and_disconnects(sk_stream):
    for name in ("send_pci", "recv_pci"):
        truth = _check_pci(sk_stream, name)
        terms = set(truth["termination"])
        assert {b"normal", b"disconnect_with_data"} <= terms
    assert b"retry" in set(_check_pci(sk_stream, "send_pci")["termination"])


def test_pci_decoder_matches_truth_on_a_64_bit_bus(intel_latency):
    truth = _check_pci(intel_latency, "recv_pci")
    assert truth["wide"].any() and (truth["kind"] == b"dma").any() and (truth["kind"] == b"csr").any()
    _check_pci(intel_latency, "send_pci")


def test_pci_decoder_matches_truth_in_timing_mode(tmp):
    path = _sim(tmp, "timing", "generic", "pci64-66", Recording(with_ad=True, samples_per_clock=4),
                kind="latency", size_bytes=600, count=2)
    with CaptureSet.open(path) as cs:
        k = 4
        truth = cs.read_table("truth/send_pci/transactions")
    for engine in ("sigrok", "builtin"):
        nicrig("decode", str(path), "--source", "send_pci", "--engine", engine, "--force")
    with CaptureSet.open(path) as cs:
        table = cs.read_table("decoded/send_pci/pci")
    assert len(table) == len(truth)
    # A clock's values stand before its rising edge at sample c*k: the decoder reports that sample.
    assert np.all(np.abs(table["ss"] - truth["ss"] * k) <= k)
    assert list(table["termination"]) == list(truth["termination"])
    assert list(table["bytes"]) == list(truth["bytes"])


def test_interrupts_match_truth(intel_latency):
    for name in ("send_pci", "recv_pci"):
        _both_paths(intel_latency, name, "irq")
        with CaptureSet.open(intel_latency) as cs:
            truth = cs.read_table(f"truth/{name}/interrupts")
            table = cs.read_table(f"decoded/{name}/irq")
        assert len(truth) >= 3
        assert list(table["ss"]) == list(truth["ss"])
        assert list(table["es"]) == list(truth["es"])
        assert list(table["t_ns"]) == list(np.rint(truth["t_assert_ps"] / 1000).astype(np.int64))
        assert list(table["duration_ns"]) == list(
            np.rint(truth["t_deassert_ps"] / 1000).astype(np.int64) - np.rint(truth["t_assert_ps"] / 1000).astype(np.int64))


def _check_frames(path: Path) -> np.ndarray:
    records = _both_paths(path, "probe", "ethernet")
    with CaptureSet.open(path) as cs:
        truth = cs.read_table("truth/probe/frames")
    truth = truth[np.argsort(truth["ss"], kind="stable")]
    assert len(records) == len(truth)
    for rec, t in zip(records, truth):
        where = f"frame at clock {t['ss']}"
        assert (rec["ss"], rec["es"]) == (t["ss"], t["es"]), where
        assert rec["direction"] == t["direction"].decode(), where
        assert rec["length"] == t["length"], where
        assert (rec["dst"], rec["src"]) == (t["dst"].decode(), t["src"].decode()), where
        assert rec["fcs_ok"] == t["fcs_ok"], where
        assert rec["pause_quanta"] == t["pause_quanta"], where
        assert rec["seq"] == t["seq"], where
        assert rec["frag_offset"] == t["ip_fragment_offset"], where
    return truth


def test_ethernet_decoder_matches_truth_with_fragments(intel_latency):
    truth = _check_frames(intel_latency)
    assert (truth["ip_fragment_offset"] > 0).any()


def test_ethernet_decoder_finds_every_pause_frame(pause_stream):
    truth = _check_frames(pause_stream)
    pauses = truth[truth["kind"] == b"pause"]
    quanta = profiles.load("nic", "intel-pro1000").pause_quanta  # the profile's XOFF time (the e1000's 0x100)
    assert len(pauses) >= 2 and (pauses["pause_quanta"] == quanta).any() and (pauses["pause_quanta"] == 0).any()


def test_linkactivity_decoder_matches_the_frames_on_the_wire(intel_latency):
    """The probe's LINK_ACT wire (frame presence, A to B): durations and sizes of every transmitted frame."""
    records = _both_paths(intel_latency, "probe", "linkactivity")
    with CaptureSet.open(intel_latency) as cs:
        truth = cs.read_table("truth/probe/frames")
    tx = truth[truth["direction"] == b"tx"]
    assert [(r["ss"], r["es"]) for r in records] == list(zip(tx["ss"], tx["es"]))
    assert [r["est_bytes"] for r in records] == list(tx["length"])
    assert [r["duration_ns"] for r in records] == list((tx["length"] + 8) * 8)


def test_pcap_of_a_simulated_link_opens_in_tshark_and_scapy(intel_latency, tmp):
    sr = tmp / "probe.sr"
    nicrig("export", str(intel_latency), "--source", "probe", "-o", str(sr))
    env = dict(os.environ, SIGROKDECODE_DIR=str(DECODERS_DIR))
    with CaptureSet.open(intel_latency) as cs:
        stack = [s for s in spec.auto_stacks(cs.source("probe")) if "direction=rx" in s.text()][0]
        truth = cs.read_table("truth/probe/frames")
    pcap = tmp / "rx.pcap"
    with open(pcap, "wb") as f:
        subprocess.run(["sigrok-cli", "-i", str(sr), "-P", stack.text(), "-B", "ethernet=pcap"],
                       stdout=f, env=env, check=True)
    rx = truth[truth["direction"] == b"rx"]
    packets = rdpcap(str(pcap))
    assert [len(p) for p in packets] == list(rx["length"] - 4)
    if shutil.which("tshark"):
        out = subprocess.run(["tshark", "-r", str(pcap), "-T", "fields", "-e", "frame.len", "-e", "ip.src"],
                             capture_output=True, text=True, check=True).stdout.split("\n")
        assert [line.split("\t")[0] for line in out if line] == [str(n - 4) for n in rx["length"]]


def test_decode_with_explicit_stack_and_vector_map(intel_latency):
    nicrig("decode", str(intel_latency), "--source", "send_pci", "-P",
           "pci:frame=FRAME#:irdy=IRDY#:trdy=TRDY#:devsel=DEVSEL#:stop=STOP#:ad=AD:cbe=C/BE#:clock=state")
    with CaptureSet.open(intel_latency) as cs:
        table = cs.read_table("decoded/send_pci/pci")
        truth = cs.read_table("truth/send_pci/transactions")
        attrs = cs.table_attrs("decoded/send_pci/pci")
    assert list(table["address"]) == list(truth["address"].astype(np.int64))
    assert "ad31=AD[31]" in attrs["decoders"] and "builtin" in attrs["engine"]
    nicrig("decode", str(intel_latency), "--source", "send_pci", "--engine", "sigrok", "--force", "-P",
           "pci:frame=FRAME#:irdy=IRDY#:trdy=TRDY#:devsel=DEVSEL#:stop=STOP#:ad=AD:cbe=C/BE#:clock=state")
    with CaptureSet.open(intel_latency) as cs:
        assert cs.read_table("decoded/send_pci/pci").tobytes() == table.tobytes()
        assert "sigrok-cli" in cs.table_attrs("decoded/send_pci/pci")["engine"]


@pytest.mark.parametrize("argv, message", [
    (["-P", "nosuch:frame=FRAME#"], "no decoder 'nosuch'"),
    (["-P", "pci:frame=NOPE"], "no channel 'NOPE'"),
    (["-P", "pci:frame=FRAME#"], "required channel"),
    (["-P", "pci:frame=FRAME#:irdy=IRDY#:trdy=TRDY#:devsel=DEVSEL#:bogus=1"], "no channel or option 'bogus'"),
    (["-P", "ethernet"], "put a logic decoder first"),
])
def test_decode_errors_are_one_clear_line(intel_latency, argv, message):
    r = subprocess.run([sys.executable, "-m", "nicrig", "decode", str(intel_latency), "--source", "send_pci", *argv],
                       capture_output=True, text=True)
    assert r.returncode == 2 and message in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_events_prints_csv_and_json(intel_latency):
    nicrig("decode", str(intel_latency))
    csv_out = nicrig("events", str(intel_latency), "--source", "send_pci", "--decoder", "pci",
                     "--where", "kind=CSR", "--limit", "3").stdout.splitlines()
    assert csv_out[0].startswith("ss,es,t_ns,t_end_ns,command,") and len(csv_out) == 4
    assert all(",csr," in line for line in csv_out[1:])
    # a CSR address as the PCI decoder writes it selects that register's transactions
    address = next(csv.DictReader(csv_out))["address"]
    assert re.fullmatch(r"0x[0-9a-f]{8}", address)
    same = nicrig("events", str(intel_latency), "--source", "send_pci", "--decoder", "pci", "--json",
                  "--where", f"address={address.upper().replace('0X', '0x')}").stdout.splitlines()
    assert same and all(json.loads(x)["address"] == address for x in same)
    rows = [json.loads(x) for x in nicrig("events", str(intel_latency), "--source", "probe", "--decoder",
                                          "ethernet", "--json").stdout.splitlines()]
    assert {r["direction"] for r in rows} == {"tx", "rx"}
    assert {r["ethertype"] for r in rows} == {"0x0800"} and all(r["fcs_ok"] is True for r in rows)
    r = subprocess.run([sys.executable, "-m", "nicrig", "events", str(intel_latency), "--source", "probe",
                        "--decoder", "pci"], capture_output=True, text=True)
    assert r.returncode == 2 and "no decoded pci table" in r.stderr


def test_decoders_install_where_sigrok_finds_them(tmp):
    target = tmp / "installed"
    nicrig("decoders", "install", "--dir", str(target))
    assert {p.name for p in target.iterdir()} == {"pci", "gmii", "ethernet", "irq", "linkactivity"}
    env = dict(os.environ, SIGROKDECODE_DIR=str(target))
    listing = subprocess.run(["sigrok-cli", "-L"], capture_output=True, text=True, env=env)
    for pd in ("pci", "gmii", "ethernet", "irq", "linkactivity"):
        assert f"\n  {pd} " in listing.stdout
    assert "Traceback" not in listing.stderr and "Failed to load" not in listing.stderr
    info = json.loads(nicrig("decoders", "list", "--json").stdout)
    assert info["pci"]["channels"] == ["frame", "irdy", "trdy", "devsel"]


def test_commands_of_an_exported_stack_use_the_source_channel_order(intel_latency):
    with CaptureSet.open(intel_latency) as cs:
        src = cs.source("send_pci")
        stack = spec.auto_stacks(src)[0]
        cmd = _command(src, stack)
    assert f"frame={src.channels.index('FRAME#')}" in cmd[cmd.index("-P") + 1]
