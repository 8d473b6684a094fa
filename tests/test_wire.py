"""Wire sources: pcap and pcapng in (files the real tools wrote), the ethernet table out, pcap and pcapng back.

The files come from tcpdump, dumpcap and editcap recording loopback traffic this test sends (root), from
Scapy-built frames, and from nicrig's own export of a simulated GMII probe; tshark reads every file nicrig
writes and must see the same times. A frame through the wire path must give the row the GMII path gives.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nicrig import cli
from nicrig.acquisition import wire
from nicrig.acquisition.capture import CaptureSet
from nicrig.acquisition.pcap import (FLAG_CRC_ERROR, FLAG_INBOUND, FLAG_OUTBOUND, CaptureReader, DamagedCapture,
                                     PcapngWriter, stamps_to_ns)
from nicrig.analysis.wire import pair_stream
from nicrig.decoders import builtin, tables, wire_frames
from nicrig.errors import FormatError
from nicrig.udpmon import payload
from nicrig.udpmon.results import ResultsFile

ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(not ROOT, reason="packet capture needs root")
TOOLS = ("tcpdump", "dumpcap", "editcap", "tshark")


def nicrig(*argv: str) -> int:
    return cli.main([str(a) for a in argv])


def tshark(path: Path, *fields: str) -> list[list[str]]:
    """Rows of ``fields`` as tshark reads ``path`` (its warnings about running as root go to stderr)."""
    r = subprocess.run(["tshark", "-r", str(path), "-T", "fields", "-E", "separator=|",
                        *(a for f in fields for a in ("-e", f))], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return [line.split("|") for line in r.stdout.splitlines()]


def epoch_ns(text: str) -> int:
    whole, _, frac = text.partition(".")
    return int(whole) * 10 ** 9 + int((frac + "000000000")[:9])


def ethernet(path: Path, source: str) -> np.ndarray:
    with CaptureSet.open(path) as cs:
        return cs.read_table(f"decoded/{source}/ethernet")


def same_but_numbering(a: np.ndarray, b: np.ndarray) -> list[str]:
    """Columns that differ, ``ss`` and ``es`` (samples of one source, frame numbers of the other) aside."""
    assert len(a) == len(b)
    return [n for n in a.dtype.names if n not in ("ss", "es") and not np.array_equal(a[n], b[n])]


# -- a simulated GMII probe exported and imported back --------------------------------------------

@pytest.fixture(scope="module")
def probe_set(tmp_path_factory):
    """A decoded simulated stream whose receiver sends PAUSE frames: both directions on the probe."""
    folder = tmp_path_factory.mktemp("probe")
    path = folder / "stream.h5"
    assert nicrig("simulate", "--scenario", "stream", "--nic", "intel-pro1000", "--bus", "pci64-66", "--recv-bus",
                  "pci32-33", "--size", "1400", "--spacing-us", "11", "--count", "1000", "--rounds", "1", "-o", path) == 0
    assert nicrig("decode", path, "--source", "probe") == 0
    return path


def test_probe_exported_to_pcapng_and_imported_back_gives_the_identical_table(probe_set, tmp_path):
    table = ethernet(probe_set, "probe")
    assert (table["direction"] == b"rx").any() and (table["pause_quanta"] > 0).any()
    pcapng = tmp_path / "probe.pcapng"
    assert nicrig("export", probe_set, "--source", "probe", "-o", pcapng) == 0
    back = tmp_path / "back.h5"
    assert nicrig("import", pcapng, "-o", back) == 0
    assert nicrig("decode", back) == 0
    again = ethernet(back, "probe")
    assert same_but_numbering(table[np.argsort(table["t_ns"], kind="stable")], again) == []
    # the imported source written out again is the same file, byte for byte
    twice = tmp_path / "twice.pcapng"
    assert nicrig("export", back, "-o", twice) == 0
    assert twice.read_bytes() == pcapng.read_bytes()


def test_the_report_and_the_gui_show_a_wire_source_beside_its_probe(probe_set, tmp_path):
    pcapng, both = tmp_path / "probe.pcapng", tmp_path / "both.h5"
    assert nicrig("export", probe_set, "--source", "probe", "-o", pcapng) == 0
    shutil.copy(probe_set, both)
    assert nicrig("import", pcapng, "--append", "-o", both, "--source", "tap") == 0
    assert nicrig("decode", both) == 0
    report = tmp_path / "report.json"
    assert nicrig("report", both, "-o", report) == 0
    section = next(s for s in json.loads(report.read_text())["sections"] if s["title"] == "Wire: tap of both.h5")
    items = {i["label"]: i["raw"]["value"] for i in section["items"]}
    table = ethernet(both, "tap")
    assert items["frames captured"] == len(table) and items["PAUSE frames (XOFF)"] == int((table["pause_quanta"] > 0).sum())
    by_direction = {r[0]: r[1] for r in section["tables"][0]["raw_rows"]}
    assert by_direction == {"outbound": int((table["direction"] == b"tx").sum()),
                            "inbound": int((table["direction"] == b"rx").sum())}
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from nicrig.gui import prepare
    from nicrig.gui.document import Document

    doc = Document(both)
    try:
        prepare.prepare(both, doc.take, threads=1)  # the background preparer's work, here in order
        lanes = {lane.id: lane for lane in doc.lanes}
        assert {"tap/", "tap/decoded/ethernet/tx", "tap/decoded/ethernet/rx"} <= set(lanes)
        probe_tx, tap_tx = lanes["probe/decoded/ethernet/tx"].boxes, lanes["tap/decoded/ethernet/tx"].boxes
        assert np.array_equal(probe_tx.t_ns, tap_tx.t_ns)  # on the timeline, each frame where the probe saw it
    finally:
        doc.close()


@pytest.mark.parametrize("suffix,magic,resolution", [(".pcap", 0xA1B23C4D, []), (".pcap", 0xA1B2C3D4, ["us"]),
                                                     (".pcapng", None, [])])
def test_tshark_reads_every_export_with_nicrigs_times(probe_set, tmp_path, suffix, magic, resolution):
    out = tmp_path / f"probe{suffix}"
    assert nicrig("export", probe_set, "--source", "probe", "-o", out,
                  *(["--resolution", *resolution] if resolution else [])) == 0
    if magic is not None:
        assert struct.unpack("<I", out.read_bytes()[:4])[0] == magic
    with CaptureSet.open(probe_set) as cs:
        origin = int(__import__("datetime").datetime.fromisoformat(cs.attrs["created_utc"]).timestamp()) * 10 ** 9
    table = ethernet(probe_set, "probe")
    table = table[np.argsort(table["t_ns"], kind="stable")]
    rows = tshark(out, "frame.time_epoch", "frame.len", "eth.fcs.status", "udp.srcport")
    assert len(rows) == len(table)
    times = np.array([epoch_ns(r[0]) for r in rows])
    unit = 1000 if resolution == ["us"] else 1
    assert np.array_equal(times, (origin + table["t_ns"]) // unit * unit)
    assert [int(r[1]) for r in rows] == table["length"].tolist()  # the FCS is in the file and tshark knows it
    assert all(r[2] for r in rows)


def test_export_frames_are_the_ethernet_decoders_own_pcap_octets(tmp_path):
    """The octets nicrig reads back from the GMII rows equal the ethernet PD's pcap output run by sigrok-cli."""
    if shutil.which("sigrok-cli") is None:
        pytest.skip("sigrok-cli not installed")
    path = tmp_path / "small.h5"
    assert nicrig("simulate", "--scenario", "stream", "--nic", "intel-pro1000", "--bus", "pci64-66", "--size", "300",
                  "--spacing-us", "5", "--count", "40", "--rounds", "1", "-o", path) == 0
    assert nicrig("decode", path, "--source", "probe") == 0
    sr, ours = tmp_path / "probe.sr", tmp_path / "ours.pcap"
    assert nicrig("export", path, "--source", "probe", "-o", ours) == 0
    r = subprocess.run([sys.executable, "-m", "nicrig", "export", str(path), "--source", "probe", "-o", str(sr),
                        "--json"], capture_output=True, text=True, check=True)
    line = next(c for c in json.loads(r.stdout)["pcap_commands"] if c["direction"] == "tx")
    env = {**os.environ, "SIGROKDECODE_DIR": str(Path(wire_frames.__file__).parent)}
    subprocess.run(line["command"], shell=True, check=True, env=env, cwd=tmp_path, timeout=300)
    theirs = [f for b in CaptureReader(line["pcap"]).batches() for f in (b.frame(i) for i in range(len(b)))]
    mine = [f[:-4] for b in CaptureReader(ours).batches() for f in (b.frame(i) for i in range(len(b)))]
    assert theirs and mine[:len(theirs)] == theirs


# -- files the real tools wrote --------------------------------------------------------------------

def _free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(argv: list[str], ready: str, stderr_path: Path) -> subprocess.Popen:
    """A capture tool, once it says it listens (its stderr in a file)."""
    err = open(stderr_path, "w")  # noqa: SIM115 - the process writes it
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err)
    end = time.monotonic() + 60
    while ready not in stderr_path.read_text():
        assert proc.poll() is None, stderr_path.read_text()
        assert time.monotonic() < end, f"{argv[0]} did not start"
        time.sleep(0.05)
    return proc


def _datagrams_to(path: Path, port: int) -> int:
    """UDP datagrams to ``port`` a capture being written holds so far (a block written halfway is not one; Ethernet
    and an IPv4 header without options, as the kernel sends them on loopback)."""
    got = 0
    try:
        for b in CaptureReader(path).batches():
            got += sum(b.frame(i)[36:38] == port.to_bytes(2, "big") for i in range(len(b)))
    except FormatError:  # DamagedCapture too: the tool is writing its last block
        pass
    return got


def _wait_for(paths: list[Path], port: int, count: int, poke: Callable[[], None] = lambda: None) -> None:
    """Until each capture holds ``count`` datagrams to ``port`` (at most a minute: no fixed wait on a busy machine),
    calling ``poke`` between looks."""
    end = time.monotonic() + 60
    for path in paths:
        while _datagrams_to(path, port) < count and time.monotonic() < end:
            poke()
            time.sleep(0.05)


@pytest.fixture(scope="module")
def tool_captures(tmp_path_factory):
    """The same 40 nicrig datagrams recorded by tcpdump (nanosecond pcap), dumpcap (pcapng) and, converted from
    tcpdump's, editcap (nanosecond pcapng), after a few to another port that showed both tools capturing; and the
    datagrams' (seq, size, source port) and their port."""
    if not ROOT or any(shutil.which(t) is None for t in TOOLS):
        pytest.skip("needs root and tcpdump, dumpcap, editcap, tshark")
    folder = tmp_path_factory.mktemp("tools")
    port = _free_udp_port()
    sink = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sink.bind(("127.0.0.1", port))
    pcap, pcapng, edited = folder / "tcpdump.pcap", folder / "dumpcap.pcapng", folder / "editcap.pcapng"
    ready = _free_udp_port()  # datagrams that show a tool is capturing (its "listening" line comes before that)
    f = f"udp port {port} or udp port {ready}"
    procs = [_start(["tcpdump", "-i", "lo", "-Z", "root", "--immediate-mode", "-U", "--time-stamp-precision", "nano",
                     "-w", str(pcap), f],
                    "listening on", folder / "tcpdump.err"),
             _start(["dumpcap", "-i", "lo", "-f", f, "-w", str(pcapng)], "Capturing on", folder / "dumpcap.err")]
    sent = []
    rng = np.random.default_rng(5)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        _wait_for([pcap, pcapng], ready, 1, lambda: s.sendto(b"ready", ("127.0.0.1", ready)))
        for seq in range(40):
            size = int(rng.integers(16, 2000))
            s.sendto(payload.make_payload(size, payload.Kind.STREAM, seq, 77, rng), ("127.0.0.1", port))
            sent.append((seq, size, s.getsockname()[1]))
            time.sleep(0.001)
    _wait_for([pcap, pcapng], port, len(sent))  # every datagram written before the tools stop
    for p in procs:
        p.send_signal(signal.SIGINT)
        p.wait(30)
    sink.close()
    subprocess.run(["editcap", "-F", "pcapng", str(pcap), str(edited)], check=True, capture_output=True)
    return {"tcpdump": pcap, "dumpcap": pcapng, "editcap": edited}, sent, port


@pytest.mark.parametrize("tool", ["tcpdump", "dumpcap", "editcap"])
def test_captures_of_the_real_tools_import_with_their_times(tool_captures, tmp_path, tool):
    files, sent, port = tool_captures
    path = files[tool]
    out = tmp_path / "set.h5"
    assert nicrig("import", path, "-o", out, "--stamp-clock", "kernel") == 0
    assert nicrig("decode", out) == 0
    with CaptureSet.open(out) as cs:
        src = wire.WireSource(cs, path.stem)
        frames = src.frames()
        assert src.interfaces["clock"][0] == b"kernel" and src.interfaces["tsresol"][0] == 9
    rows = tshark(path, "frame.time_epoch", "frame.len", "frame.cap_len")
    assert frames["time_ns"].tolist() == [epoch_ns(r[0]) for r in rows]  # to the nanosecond, no float seconds
    assert frames["origlen"].tolist() == [int(r[1]) for r in rows]
    assert frames["caplen"].tolist() == [int(r[2]) for r in rows]
    table = ethernet(out, path.stem)
    ours = table[table["udp_dport"] == port]
    assert [(int(r["seq"]), int(r["length"]) - 4 - 42) for r in ours] == [(s, n) for s, n, _ in sent]
    assert (ours["udp_sport"] == sent[0][2]).all() and (ours["nicrig_kind"] == 1).all() and ours["fcs_ok"].all()
    assert np.array_equal(ours["t_ns"], frames["time_ns"][ours["ss"]] - frames["time_ns"][0])


def test_byte_order_and_microseconds_of_pcap_are_read(tool_captures, tmp_path):
    """tcpdump's file as a big-endian microsecond pcap (header and records swapped, as a big-endian host writes
    it): the same frames, times to the microsecond."""
    files, _, _ = tool_captures
    raw = files["tcpdump"].read_bytes()
    head = struct.unpack("<IHHiIII", raw[:24])
    out = bytearray(struct.pack(">IHHiIII", 0xA1B2C3D4, *head[1:]))
    pos = 24
    while pos < len(raw):
        secs, ns, cap, orig = struct.unpack_from("<IIII", raw, pos)
        out += struct.pack(">IIII", secs, ns // 1000, cap, orig) + raw[pos + 16:pos + 16 + cap]
        pos += 16 + cap
    big = tmp_path / "big.pcap"
    big.write_bytes(bytes(out))
    little = [f for b in CaptureReader(files["tcpdump"]).batches() for f in (b.frame(i) for i in range(len(b)))]
    reader = CaptureReader(big)
    batches = list(reader.batches())
    assert [f for b in batches for f in (b.frame(i) for i in range(len(b)))] == little
    assert reader.sections[0]["byte_order"] == "big" and reader.interfaces[0].tsresol == 6
    us = stamps_to_ns(batches[0].stamp, 6)
    assert [epoch_ns(r[0]) // 1000 * 1000 for r in tshark(files["tcpdump"], "frame.time_epoch")] == us.tolist()


def test_a_damaged_capture_keeps_every_frame_before_the_damage(tool_captures, tmp_path, capsys):
    files, _, _ = tool_captures
    raw = files["dumpcap"].read_bytes()
    offsets = [int(b) for batch in CaptureReader(files["dumpcap"]).batches() for b in batch.offset]
    cut = tmp_path / "cut.pcapng"
    cut.write_bytes(raw[:offsets[10] + 30])  # inside the 11th frame's block
    out = tmp_path / "cut.h5"
    assert nicrig("import", cut, "-o", out) == 1
    err = capsys.readouterr().err
    assert f"damaged at byte {offsets[10]:,}" in err and "10 frames before it" in err
    with CaptureSet.open(out) as cs:
        src = wire.WireSource(cs, "cut")
        assert len(src) == 10 and f"byte {offsets[10]:,}" in src.info.damage
    bad = bytearray(raw)
    bad[offsets[3] + 4:offsets[3] + 8] = struct.pack("<I", 13)  # a block length no block has
    broken = tmp_path / "broken.pcapng"
    broken.write_bytes(bytes(bad))
    assert nicrig("import", broken, "-o", tmp_path / "broken.h5") == 1
    assert f"damaged at byte {offsets[3]:,}: block length 13" in capsys.readouterr().err


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_damage_is_an_error_with_its_offset_never_a_crash(tool_captures, data):
    files, _, _ = tool_captures
    raw = bytearray(files[data.draw(st.sampled_from(["tcpdump", "dumpcap"]))].read_bytes())
    for _ in range(data.draw(st.integers(0, 3))):
        raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.integers(0, 255))
    raw = raw[:data.draw(st.integers(0, len(raw)))]
    path = Path(os.environ.get("TMPDIR", "/tmp")) / f"nicrig-hyp-{os.getpid()}.pcap"
    path.write_bytes(bytes(raw))
    try:
        got = 0
        try:
            for b in CaptureReader(path).batches():
                got += len(b)
                assert (b.caplen >= 0).all() and len(b.data) == int(b.caplen.sum())
        except DamagedCapture as exc:
            assert 0 <= exc.offset <= len(raw) and exc.frames == got
        except FormatError:
            pass
    finally:
        path.unlink(missing_ok=True)


# -- frames Scapy builds: the wire path and the GMII decoders agree ---------------------------------

def scapy_frames() -> list[bytes]:
    from scapy.contrib.mac_control import MACControlPause
    from scapy.layers.inet import IP, UDP, fragment
    from scapy.layers.l2 import Dot1Q, Ether

    hdr = payload.make_payload(2000, payload.Kind.RESPONSE, 9, 3, np.random.default_rng(1))
    frames = [Ether(dst="01:80:c2:00:00:01", src="00:60:1d:00:00:02") / MACControlPause(pause_time=0x1234),
              Ether(src="00:60:1d:00:00:01", dst="00:60:1d:00:00:02") / Dot1Q(vlan=42) / IP(src="198.18.0.1",
              dst="198.18.0.2") / UDP(sport=5001, dport=5002) / payload.make_payload(100, payload.Kind.STREAM, 7, 1,
                                                                                    np.random.default_rng(2)),
              Ether(dst="00:60:1d:00:00:02", src="00:60:1d:00:00:01", type=46) / bytes(46)]  # 802.3 length field
    frames += [Ether(src="00:60:1d:00:00:02", dst="00:60:1d:00:00:01") / f
               for f in fragment(IP(src="198.18.0.2", dst="198.18.0.1", id=7) / UDP(sport=5002, dport=5001) / hdr,
                                 fragsize=1000)]
    return [bytes(f) for f in frames]


def test_scapy_frames_through_the_wire_path_give_the_gmii_decoders_records(tmp_path):
    """Every frame, written into a pcapng by nicrig's writer (with its FCS, one of them wrong) and decoded as a wire
    source, gives the record the gmii,ethernet PDs (the reference, in nicrig's runtime) give for the same frame on
    GMII."""
    import zlib

    frames = scapy_frames()
    with_fcs = [f + (zlib.crc32(f) & 0xFFFFFFFF).to_bytes(4, "little") for f in frames]
    with_fcs[1] = with_fcs[1][:-1] + bytes([with_fcs[1][-1] ^ 0xFF])
    path = tmp_path / "scapy.pcapng"
    with open(path, "wb") as f:
        w = PcapngWriter(f, application="test")
        k = w.add_interface(name="tap", tsresol=9, fcs_bytes=4)
        for i, frame in enumerate(with_fcs):
            w.write(k, 1_700_000_000_000_000_000 + 20_000 * i, frame, flags=FLAG_INBOUND)
    out = tmp_path / "scapy.h5"
    assert nicrig("import", path, "-o", out) == 0
    assert nicrig("decode", out) == 0
    table = ethernet(out, "scapy")
    rows, _ = wire_frames.gmii_rows(with_fcs, [0] * len(with_fcs))
    lines = builtin.pd_lines(wire_frames.calls("rx", 1e9), iter([rows]), samplerate=125_000_000,
                             unitsize=wire_frames.UNITSIZE)
    reference = tables.records_to_columns("ethernet", [json.loads(line) for line in lines])
    assert len(reference) == len(table) == len(frames)
    assert same_but_numbering(reference[[n for n in reference.dtype.names if n not in ("t_ns", "t_end_ns")]],
                              table[[n for n in reference.dtype.names if n not in ("t_ns", "t_end_ns")]]) == []
    assert table["pause_quanta"][0] == 0x1234 and table["vlan"][1] == 42 and not table["fcs_ok"][1]
    assert (table["seq"][3:] == 9).all() and (table["frag_offset"][3:] > 0).sum() == len(frames) - 4


def test_frames_without_fcs_count_it_and_trust_the_flags(tmp_path):
    """A pcap frame without FCS: length counts the 4 octets the wire had; fcs_ok follows epb_flags' CRC error."""
    frames = scapy_frames()[:2]
    path = tmp_path / "nofcs.pcapng"
    with open(path, "wb") as f:
        w = PcapngWriter(f, application="test")
        k = w.add_interface(name="tap", tsresol=0x80 | 30)  # 2^-30 s stamps: finer than a nanosecond
        w.write(k, 3 << 30, frames[0], flags=FLAG_OUTBOUND)
        w.write(k, (3 << 30) + 1, frames[1], flags=FLAG_OUTBOUND | FLAG_CRC_ERROR)
    out = tmp_path / "nofcs.h5"
    assert nicrig("import", path, "-o", out) == 0
    with CaptureSet.open(out) as cs:
        table, _ = wire_frames.ethernet_table(wire.WireSource(cs, "nofcs"))
        frames_rows = wire.WireSource(cs, "nofcs").frames()
    assert table["length"].tolist() == [len(f) + 4 for f in frames]
    assert table["fcs_ok"].tolist() == [True, False] and (table["direction"] == b"tx").all()
    assert frames_rows["time_ns"].tolist() == [3 * 10 ** 9, 3 * 10 ** 9]  # 0.93 ns later: the same ns, floored
    assert frames_rows["stamp"].tolist() == [3 << 30, (3 << 30) + 1]  # the exact stamp is kept


def test_info_and_events_show_a_wire_source(probe_set, tmp_path, capsys):
    pcapng, out = tmp_path / "p.pcapng", tmp_path / "w.h5"
    assert nicrig("export", probe_set, "--source", "probe", "-o", pcapng) == 0
    capsys.readouterr()
    assert nicrig("import", pcapng, "-o", out, "--source", "tap", "--json") == 0
    imported = json.loads(capsys.readouterr().out)
    assert imported["source"]["kind"] == "wire" and imported["source"]["interfaces"][0]["clock"] == "instrument"
    assert nicrig("info", out) == 0
    assert "wire sources (1)" in capsys.readouterr().out
    assert nicrig("decode", out) == 0
    capsys.readouterr()
    assert nicrig("events", out, "--source", "tap", "--decoder", "ethernet", "--where", "direction=rx",
                  "--limit", "1") == 0
    assert "rx" in capsys.readouterr().out


def test_import_options_for_packets_and_unknown_files(tmp_path, capsys):
    junk = tmp_path / "junk.pcap"
    junk.write_bytes(b"not a capture at all")
    assert nicrig("import", junk, "-o", tmp_path / "j.h5") == 2
    assert "not a pcap or pcapng file" in capsys.readouterr().err
    vcd = tmp_path / "x.vcd"
    vcd.write_text("$timescale 1ns $end\n$enddefinitions $end\n")
    assert nicrig("import", vcd, "-o", tmp_path / "x.h5", "--stamp-clock", "kernel") == 2
    assert "apply to pcap and pcapng input only" in capsys.readouterr().err
    assert nicrig("import", junk, "-o", tmp_path / "j.h5", "--sample-rate", "1e6", "--window", "1") == 2
    assert "--sample-rate, --window do not apply to pcap and pcapng input" in capsys.readouterr().err
    kept = tmp_path / "kept.h5"
    kept.write_bytes(b"a file the import must not replace")
    assert nicrig("import", junk, "-o", kept) == 2 and "give --force to replace it" in capsys.readouterr().err
    assert kept.read_bytes() == b"a file the import must not replace"
    assert not (tmp_path / "j.h5").exists()


# -- udpmon --capture ----------------------------------------------------------------------------------

def _serve(host: object | None, port: int, *extra: str) -> subprocess.Popen:
    """A udpmon daemon: on loopback (``host`` None) or in a test host's namespace, once it listens."""
    argv = [sys.executable, "-m", "nicrig", "udpmon", "serve", "--port", str(port), *extra]
    if host is not None:
        proc = host.popen([*argv, "--bind", host.address])
        host.wait_listening(port, proc)
        return proc
    proc = subprocess.Popen(argv, stderr=subprocess.DEVNULL)
    end = time.monotonic() + 120
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), 1).close()
            return proc
        except OSError:
            assert proc.poll() is None and time.monotonic() < end, "the daemon did not start"
            time.sleep(0.1)


def _pairing(report: Path) -> dict:
    doc = json.loads(report.read_text())
    return next({i["label"]: i["raw"]["value"] for i in s["items"]} for s in doc["sections"] if s["title"].startswith("Wire"))


@needs_root
def test_udpmon_capture_on_loopback_pairs_every_datagram(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    daemon = _serve(None, port)
    try:
        for kind, extra in (("stream", ["--sizes", "64,1472", "--spacing-us", "0,10", "--count", "1000"]),
                            ("latency", ["--sizes", "64,2000", "--count", "100"])):
            out = tmp_path / f"{kind}.h5"
            r = subprocess.run([sys.executable, "-m", "nicrig", "udpmon", kind, "127.0.0.1", "--port", str(port),
                                "--rounds", "1", *extra, "--capture", "-o", str(out)], capture_output=True, text=True,
                               timeout=300)
            assert r.returncode == 0, r.stderr
            assert "into wire/lo" in r.stderr
            report = tmp_path / f"{kind}.json"
            assert nicrig("report", out, "-o", report) == 0
            items = _pairing(report)
            assert items["share paired"] >= 99.9
            assert items["datagrams sent"] - items["of them paired with their frame on the wire"] == \
                items["sent without a frame on the wire"]
            assert items["frames of the tests matching no datagram sent"] == 0
        # truth: the kernel stamps a datagram once, so the far engine's kernel receive stamp (CLOCK_REALTIME) is the
        # inbound frame's, moved back by the same offset the capture's timeline moved it by
        with ResultsFile.open(tmp_path / "stream.h5") as f:
            src = wire.WireSource(f, "lo")
            pairing = pair_stream(
                f.read_table("stream/points"), f.read_table("stream/sent"), f.read_table("stream/received"),
                f.read_table("decoded/lo/ethernet"))
            received = f.read_table("stream/received")
        kernel = {(int(p), int(q)): int(t) - int(src.origins[0]) for p, q, t in
                  zip(received["point"], received["seq"], received["kernel_ns"])}
        rows = pairing.rows[pairing.rows["wire_in_ns"] != np.iinfo(np.int64).min]
        same = [kernel[(int(r["point"]), int(r["seq"]))] == int(r["wire_in_ns"]) for r in rows]
        assert len(same) >= 0.999 * len(pairing.rows) and all(same)
        # the recording as a pcapng, read by tshark at the recorded nanoseconds, directions in its flags
        pcapng = tmp_path / "wire.pcapng"
        assert nicrig("export", tmp_path / "latency.h5", "--source", "lo", "-o", pcapng) == 0
        with ResultsFile.open(tmp_path / "latency.h5") as f:
            frames = wire.WireSource(f, "lo").frames()
        read = tshark(pcapng, "frame.time_epoch", "frame.packet_flags_direction")
        assert [epoch_ns(r[0]) for r in read] == frames["time_ns"].tolist()
        assert [int(r[1], 0) for r in read] == (frames["flags"] & 3).tolist()
        # the GUI's timeline: every paired datagram's frame leaving, on the engine's clock as its packets' lanes
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
        from nicrig.gui import prepare
        from nicrig.gui.document import Document

        doc = Document(tmp_path / "stream.h5")
        try:
            prepare.prepare(tmp_path / "stream.h5", doc.take, threads=1)
            lanes = {lane.id: lane for lane in doc.lanes}
            assert "udpmon:stream.h5/sent (engine)" in lanes
            left = pairing.rows["wire_out_ns"][pairing.rows["wire_out_ns"] != np.iinfo(np.int64).min]
            assert len(left) and np.isin(left - doc.base_ns, lanes["lo/decoded/ethernet/tx"].boxes.t_ns).all()
        finally:
            doc.close()
    finally:
        daemon.terminate()
        daemon.wait(10)


@needs_root
def test_udpmon_capture_on_veth_pairs_fragments_and_far_receives(tmp_path):
    from netns import netns_hosts

    with netns_hosts(2) as hosts:
        if not hosts.isolated:
            pytest.skip(f"no network namespaces: {hosts.fallback_reason}")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        secret = tmp_path / "secret"
        secret.write_text("wire test secret\n")
        secret.chmod(0o600)
        daemon = _serve(hosts.b, port, "--secret-file", str(secret))
        try:
            for kind, extra in (("stream", ["--sizes", "1000,3000", "--spacing-us", "20", "--count", "500"]),
                                ("latency", ["--sizes", "64,3000", "--count", "100"])):
                out = tmp_path / f"{kind}.h5"
                r = hosts.a.run([sys.executable, "-m", "nicrig", "udpmon", kind, hosts.b.address, "--port", str(port),
                                 "--secret-file", str(secret), "--rounds", "1", *extra, "--capture",
                                 "-o", str(out)], timeout=300)
                assert r.returncode == 0, r.stderr
                assert f"into wire/{hosts.a.interface}" in r.stderr
                report = tmp_path / f"{kind}.json"
                assert nicrig("report", out, "-o", report) == 0
                items = _pairing(report)
                assert items["share paired"] >= 99.9, items
                assert items["received (engine records) with their frame"] >= 0.999 * items["datagrams sent"] - \
                    items["received without a frame on the wire"]
                with ResultsFile.open(out) as f:
                    eth = f.read_table(f"decoded/{hosts.a.interface}/ethernet")
                assert (eth["frag_offset"] > 0).any()  # 3000-byte datagrams cross the veth in fragments
        finally:
            daemon.terminate()
            daemon.wait(10)
