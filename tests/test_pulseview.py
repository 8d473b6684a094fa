"""`nicrig export --pulseview`: the real PulseView opens the export decoded, with no step by hand.

PulseView 0.4.2 runs under Xvfb on the exported ``.sr`` (it reads the ``.pvs`` beside it);
its libsigrokdecode log (``-l 5``) shows which decoder instances it made, the channel map
each got, and that each ran over every sample of the file. sigrok-cli then decodes the
same ``.sr`` with PulseView's channel map and finds the simulator's transactions.
"""

from __future__ import annotations

import configparser
import os
import re
import shutil
import signal
import stat
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageGrab
from nicrig.acquisition.capture import CaptureSet
from nicrig.acquisition.pulseview import gvariant, ini_bytes, ini_key, ini_value
from nicrig.acquisition.sim.rig import Recording
from nicrig.acquisition.srzip import read_sr

from nicrig.cli import main
from nicrig.decoders import catalog
from nicrig.readiness import readable
from tests.conftest import simulate_set
from tests.sigrok_run import run_sigrok

PULSEVIEW = shutil.which("pulseview")
XVFB = shutil.which("Xvfb")
needs_pulseview = pytest.mark.skipif(PULSEVIEW is None or XVFB is None,
                                     reason="PulseView or Xvfb not installed (Debian packages pulseview, xvfb)")

#: libsigrokdecode's log messages (0.5.3, log level 4+) that the test reads. They are matched as text,
#: not as lines: its stderr logger writes a message in three pieces ("srd: ", the text, a newline), and
#: PulseView's decode threads and the decoders' worker threads log at the same time, so pieces of two
#: messages interleave (a line may carry two prefixes, or run on into the next message); each text is
#: written whole (one vfprintf).
DECODING = re.compile(r"Decoding: abs start sample (\d+), abs end sample (\d+) \(\d+ samples, \d+ bytes, "
                      r"unitsize = \d+\), instance ([\w-]+)\.")
DONE = re.compile(r"Done, handled all samples \(abs cur (\d+) / abs end (\d+)\)\.")
CHANNELS = re.compile(r"Setting channels for instance (?P<decoder>\w+)-\d+ with list of \d+ channels\."
                      r"| - PD ch idx (?P<index>\d+) \((?P<channel>\w+)\) = input data ch idx (?P<input>-?\d+) \(")


@pytest.fixture
def x_display() -> Iterator[str]:
    """A private Xvfb server; its display name. Stopped (and killed if need be) at the end."""
    read_fd, write_fd = os.pipe()
    xvfb = subprocess.Popen([XVFB, "-displayfd", str(write_fd), "-screen", "0", "1000x740x24", "-nolisten", "tcp"],
                            pass_fds=(write_fd,), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    os.close(write_fd)
    try:
        number = os.read(read_fd, 16).decode().strip() if readable(read_fd, 60) else ""
        if not number:
            pytest.fail("Xvfb did not report a display within 60 s")
        yield f":{number}"
    finally:
        os.close(read_fd)
        _stop(xvfb)


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(15)


#: PulseView 0.4.2's decode threads wait for more samples on condition variables without a predicate
#: (pv/data/decodesignal.cpp, DecodeSignal::decode_proc and logic_mux_proc): a notification sent between a
#: thread's last look at the data and its wait is lost, and that decoder instance is never handed its last
#: chunk (seen once in ~15 runs of the suite, under load: pci-1 stalled, irq-1 done). Its log then stops
#: growing; after STALL seconds of silence PulseView is started again, ATTEMPTS times in all.
STALL, ATTEMPTS = 60.0, 3


def run_pulseview(sr: Path, display: str, home: Path, decoders: Path, instances: list[str],
                  screenshot: Path | None = None, timeout: float = 300.0) -> str:
    """Open ``sr`` in PulseView until the bottom decoder ``instances`` all finished its last sample; its log.

    libsigrokdecode logs "Decoding: ... instance X." in PulseView's thread before it hands a chunk of
    samples to X's worker thread, which logs "Done, handled all samples" (naming no instance) once it
    has consumed the chunk; nicrig's decoders always wait on a condition, so that is one "Done" per
    chunk. Decoding is over when every instance named was handed a chunk ending at the last sample and
    there are as many "Done" at the last sample as such chunks (counting "Done" alone could count one
    instance twice while another has not started). PulseView finds the ``.pvs`` by itself. Its settings
    live in ``home`` (nothing of the user's), decoders come from ``decoders``. With ``screenshot`` the
    screen is saved once decoding is done. PulseView is stopped at the end whatever happened; one that
    stalls (see STALL) is started again.
    """
    total = len(read_sr(sr).samples)
    env = dict(os.environ, DISPLAY=display, HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"),
               XDG_DATA_HOME=str(home / ".local" / "share"), SIGROKDECODE_DIR=str(decoders))
    env.pop("QT_QPA_PLATFORM", None)
    log_path = sr.with_suffix(".pulseview.log")
    deadline = time.monotonic() + timeout
    for _ in range(ATTEMPTS):
        with open(log_path, "w") as log:
            pv = subprocess.Popen([PULSEVIEW, "-c", "-D", "-l", "5", str(sr)], env=env, stdout=log,
                                  stderr=subprocess.STDOUT, cwd=sr.parent)
        try:
            if _decoded(pv, log_path, total, instances, deadline):
                if screenshot is not None:
                    time.sleep(2.0)  # PulseView repaints the annotations from a timer after decoding
                    ImageGrab.grab(xdisplay=display).save(screenshot)
                return log_path.read_text(errors="replace")
        finally:
            _stop(pv)
    pytest.fail(f"PulseView stalled {ATTEMPTS} times on {sr.name}:\n{log_path.read_text(errors='replace')[-3000:]}")


def _decoded(pv: subprocess.Popen, log_path: Path, total: int, instances: list[str], deadline: float) -> bool:
    """Wait until PulseView's log says ``instances`` decoded all ``total`` samples (True), or it has been
    silent for STALL seconds (False); fail if PulseView exits or ``deadline`` passes first."""
    size, moved = -1, time.monotonic()
    while True:
        text = log_path.read_text(errors="replace")
        sent = [m[3] for m in DECODING.finditer(text) if int(m[2]) == total]
        done = [m for m in DONE.finditer(text) if int(m[1]) == int(m[2]) == total]
        if not Counter(instances) - Counter(sent) and len(done) >= len(sent):
            return True
        now = time.monotonic()
        if len(text) != size:
            size, moved = len(text), now
        elif now - moved > STALL:
            return False
        if pv.poll() is not None or now > deadline:
            pytest.fail(f"PulseView (exit {pv.poll()}) did not finish decoding {log_path.stem} (to sample {total}: "
                        f"{sorted(sent)} of {sorted(instances)} handed their last chunk, {len(done)} done):"
                        f"\n{text[-3000:]}")
        time.sleep(0.2)


def channel_maps(log: str) -> dict[str, list[dict[str, int]]]:
    """Per decoder id, the channel map (PD channel id -> .sr channel index, -1 unconnected) of each instance.

    libsigrokdecode logs "Setting channels for instance X", then one message per PD channel in the
    decoder's order (required, then optional channels); two decode signals set theirs at the same time
    from their own threads, so these messages interleave. A channel message belongs to the oldest
    instance still without that channel whose decoder declares it at that index (two instances of one
    decoder are told apart by that order only: the tests check them alike).
    """
    declared = {d.id: d.all_channels for d in catalog.available().values()}
    instances: list[tuple[str, dict[str, int]]] = []
    for m in CHANNELS.finditer(log):
        if m["decoder"]:
            instances.append((m["decoder"], {}))
            continue
        index, channel = int(m["index"]), m["channel"]
        owner = next((chans for dec, chans in instances
                      if channel not in chans and declared[dec][index:index + 1] == (channel,)), None)
        assert owner is not None, f"PD channel {index} ({channel}) logged for no instance set up: {m[0]!r}"
        owner[channel] = int(m["input"])
    maps: dict[str, list[dict[str, int]]] = {}
    for dec, chans in instances:
        maps.setdefault(dec, []).append(chans)
    return maps


def umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def pvs_channel_maps(pvs: Path) -> dict[str, dict[str, str]]:
    """Per decode signal name, the channel map (decoder channel id -> .sr channel name) a setup file assigns."""
    cfg = configparser.ConfigParser(interpolation=None)
    cfg.optionxform = str  # keys are case-sensitive
    cfg.read(pvs)
    maps = {}
    for section in (s for s in cfg.sections() if s.startswith("decode_signal")):
        sec = cfg[section]
        maps[sec["name"]] = {sec[f"channel{i}\\name"]: sec[f"channel{i}\\assigned_signal_name"]
                             for i in range(int(sec["channels"])) if f"channel{i}\\assigned_signal_name" in sec}
    return maps


@pytest.fixture(scope="module")
def latency_set(tmp_path_factory) -> Path:
    """One request and response on 32-bit 33 MHz PCI, AD and C/BE# recorded: every decoder has work."""
    return simulate_set(tmp_path_factory.mktemp("pv"), "lat", nic="sk9843", bus="pci32-33",
                        recording=Recording(with_ad=True), kind="latency", size_bytes=64, count=1)


@pytest.fixture
def decoders(tmp_path) -> Path:
    folder = tmp_path / "decoders"
    assert main(["decoders", "install", "--dir", str(folder)]) == 0
    return folder


@needs_pulseview
@pytest.mark.sigrok
def test_pulseview_opens_the_pci_export_decoded(latency_set, tmp_path, x_display, decoders, capsys):
    sr = tmp_path / "send.sr"
    assert main(["export", str(latency_set), "--source", "send_pci", "-o", str(sr), "--pulseview"]) == 0
    out = capsys.readouterr().out
    assert f"wrote {sr.with_suffix('.pvs')}" in out and f"pulseview {sr}" in out and "decoders install" in out
    names = read_sr(sr).channels
    assert "C/BE#[0]" in names and not any(n.startswith("CBE") for n in names)  # the PCI decoder's own names

    log = run_pulseview(sr, x_display, tmp_path / "home", decoders, ["pci-1", "irq-1"],
                        screenshot=tmp_path / "pulseview-pci.png")
    total = len(read_sr(sr).samples)
    runs = {m[3]: (int(m[1]), int(m[2])) for m in DECODING.finditer(log)}
    assert runs == {"pci-1": (0, total), "irq-1": (0, total)}
    assert "Traceback" not in log and "rror" not in "".join(line for line in log.splitlines() if "srd:" in line)

    # PulseView found by name every .sr channel the setup assigns (its mux numbers them in decoder order)
    setup = pvs_channel_maps(sr.with_suffix(".pvs"))
    want = {"frame": "FRAME#", "irdy": "IRDY#", "trdy": "TRDY#", "devsel": "DEVSEL#", "stop": "STOP#",
            "par": "PAR", "inta": "INTA#", **{f"ad{i}": f"AD[{i}]" for i in range(32)},
            **{f"cbe{i}": f"C/BE#[{i}]" for i in range(4)}}
    assert want.items() <= setup["PCI"].items() and setup["IRQ"] == {"irq": "INTA#"}
    maps = channel_maps(log)
    pci, irq = maps["pci"][0], maps["irq"][0]
    assert {k for k, v in pci.items() if v >= 0} == set(setup["PCI"])
    assert sorted(v for v in pci.values() if v >= 0) == list(range(len(setup["PCI"])))
    assert pci["clk"] == -1 and pci["ad32"] == -1  # a state capture: no CLK; a 32-bit bus
    assert irq == {"irq": 0}

    # sigrok-cli, given the setup's channel map by the .sr's names, finds the simulator's transactions
    mapping = ":".join(f"{k}={v}" for k, v in setup["PCI"].items())
    records = run_sigrok(sr, [f"pci:{mapping}:clock=state"], binary="pci=records", decoders_dir=decoders)
    records.check()
    found = records.json_lines()
    with CaptureSet.open(latency_set) as cs:
        truth = cs.read_table("truth/send_pci/transactions")
    assert len(found) == len(truth) > 0
    assert [r["address"] for r in found] == [int(a) for a in truth["address"]]
    assert [r["bytes"] for r in found] == [int(b) for b in truth["bytes"]]

    shot = np.asarray(Image.open(tmp_path / "pulseview-pci.png"))
    assert len(np.unique(shot.reshape(-1, shot.shape[-1]), axis=0)) > 50  # a drawn window, not a blank screen


@needs_pulseview
def test_pulseview_opens_the_probe_export_with_stacked_decoders(latency_set, tmp_path, x_display, decoders):
    sr = tmp_path / "probe.sr"
    assert main(["export", str(latency_set), "--source", "probe", "-o", str(sr), "--pulseview"]) == 0
    log = run_pulseview(sr, x_display, tmp_path / "home", decoders, ["gmii-1", "gmii-1", "linkactivity-1"])
    total = len(read_sr(sr).samples)
    runs = sorted(m[3] for m in DECODING.finditer(log) if int(m[2]) == total)
    assert runs == ["gmii-1", "gmii-1", "linkactivity-1"]  # a session per decode signal
    assert log.count("Stacking ethernet-1 onto gmii-1.") == 2
    setup = pvs_channel_maps(sr.with_suffix(".pvs"))
    for direction, en, er, d in (("tx", "TX_EN", "TX_ER", "TXD"), ("rx", "RX_DV", "RX_ER", "RXD")):
        assert setup[f"GMII/Ethernet {direction}"] == {"en": en, "er": er, **{f"d{i}": f"{d}[{i}]" for i in range(8)}}
    assert setup["Link activity"] == {"act": "LINK_ACT"}
    for instance in channel_maps(log)["gmii"]:  # PulseView found all ten by name; CLK unused (state capture)
        assert {k for k, v in instance.items() if v >= 0} == {"en", "er", *(f"d{i}" for i in range(8))}
    assert "Traceback" not in log


def test_setup_values_are_written_as_qsettings_writes_them():
    assert gvariant("state", "auto") == ("s", b"state\0")
    assert gvariant("0x10", 0) == ("x", (16).to_bytes(8, "little" if np.little_endian else "big"))
    assert gvariant(1e9, 1.0)[0] == "d" and len(gvariant(1e9, 1.0)[1]) == 8
    assert ini_bytes(b"tx\0") == "@ByteArray(tx\\x0)"
    assert ini_bytes(b"\0a") == "@ByteArray(\\x0\\x61)"  # a hex digit after an escape is escaped too
    assert ini_value("0x0+0x10;0x20+0x8") == '"0x0+0x10;0x20+0x8"'  # ';' would start a comment
    assert ini_value('say "hi"\\') == 'say \\"hi\\"\\\\'
    assert ini_key("decode_signals") == ("General", "decode_signals")
    assert ini_key("decode_signal0/channel3/name") == ("decode_signal0", "channel3\\name")
    assert ini_key("C/BE#[0]/enabled") == ("C", "BE%23%5B0%5D\\enabled")
    assert ini_key("General/enabled") == ("%General", "enabled")


def test_pulseview_setup_errors_and_decoder_hint(latency_set, tmp_path, decoders, capsys, monkeypatch):
    from nicrig.acquisition.capture import SourceSpec, pack_bits

    plain = tmp_path / "plain.h5"
    with CaptureSet.create(plain) as cs:
        cs.add_source(SourceSpec("s", ["A", "B"], "timing", samplerate_hz=1e6)).append(pack_bits(np.ones((8, 2))))
    capsys.readouterr()
    assert main(["export", str(plain), "-o", str(tmp_path / "p.sr"), "--pulseview"]) == 2
    assert "records no bus kind or protocol roles" in capsys.readouterr().err
    assert main(["export", str(latency_set), "--source", "send_pci", "-o", str(tmp_path / "t.vcd"),
                 "--pulseview"]) == 2
    assert "give -o FILE.sr" in capsys.readouterr().err
    assert main(["export", str(latency_set), "--source", "send_pci", "-o", str(tmp_path / "c.sr"), "--pulseview",
                 "--channels", "IRDY#,TRDY#,INTA#"]) == 0
    out = capsys.readouterr().out
    assert "no pci decoder in the PulseView setup: channel(s) FRAME#, DEVSEL# not exported" in out
    assert "decoders IRQ (1 of its channels mapped)" in out
    assert stat.S_IMODE((tmp_path / "c.pvs").stat().st_mode) == 0o666 & ~umask()  # not mkstemp's 0600
    assert not list(tmp_path.glob("*.partial"))
    monkeypatch.setenv("SIGROKDECODE_DIR", str(decoders))
    assert main(["export", str(latency_set), "--source", "send_pci", "-o", str(tmp_path / "c.sr"), "--pulseview",
                 "--channels", "FRAME#,IRDY#,TRDY#,DEVSEL#"]) == 0
    assert f"PulseView finds nicrig's decoders in {decoders}" in capsys.readouterr().out
