"""The gmii and ethernet protocol decoders (decoders/gmii, decoders/ethernet), run by the real sigrok-cli.

Frames are built with Scapy (Ether / 802.1Q / 802.1ad / IPv4 / UDP, 802.3 Annex 31B PAUSE,
802.1Qbb PFC) plus the nicrig payload header, given their FCS with zlib's CRC-32 (802.3
clause 3.2.9, little-endian on the wire), and drawn clock by clock on GMII lines (clause 35:
EN high from the first of seven 0x55 preamble octets through the last FCS octet, D<0> the
LSB). The expected decoder records are derived from Scapy's dissection of the sent octets;
pcap output is read back with Scapy and tshark.
"""

from __future__ import annotations

import random
import shutil
import subprocess
import zlib
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from gmii_lanes import (
    A_MAC,
    B_MAC,
    CHANNELS,
    CLK_CHANNELS,
    PIN_MAP,
    STATE_RATE,
    Lane,
    error_symbols_lane,
    garbage_lane,
    mixed_lane,
    nicrig_udp,
    random_bits,
    short_preamble_lane,
    timing_lane,
    truncated_lane,
)
from nicrig.acquisition.sim import ethernet as sim_eth
from nicrig.acquisition.sim import gmii as sim_gmii
from nicrig.udpmon.payload import Kind, make_payload, parse_header
from scapy.contrib.mac_control import MACControlClassBasedFlowControl, MACControlPause
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Dot1AD, Dot1Q, Dot3, Ether
from scapy.utils import rdpcap
from sigrok_run import decoder_spec, run_sigrok, sigrok_cli_available, write_session

pytestmark = [
    pytest.mark.sigrok,
    pytest.mark.skipif(not sigrok_cli_available(), reason="needs sigrok-cli"),
]

BRIEF_KEYS = {
    "ss", "es", "direction", "length", "dst", "src", "vlan", "ethertype", "fcs_ok", "pause_quanta",
    "pause_ns", "pfc", "ip_src", "ip_dst", "ip_proto", "frag_offset", "udp_sport", "udp_dport",
    "nicrig_kind", "seq",
}


def gmii(options: dict | None = None, pins: dict | None = None) -> str:
    return decoder_spec("gmii", pins or PIN_MAP, options)


def expected_record(ss: int, es: int, data: bytes, er_at: tuple[int, ...] = (), direction: str = "tx",
                    link_rate: float = 1e9) -> dict:
    """The record a correct decoder gives, from Scapy's dissection of the sent octets."""
    pkt = Ether(data[:-4])
    rec = dict(ss=ss, es=es, direction=direction, length=len(data), dst=pkt.dst, src=pkt.src, vlan=-1,
               fcs_ok=zlib.crc32(data[:-4]).to_bytes(4, "little") == data[-4:], error_octets=len(er_at),
               pause_quanta=-1, pause_ns=-1, pfc=None, ip_src=None, ip_dst=None, ip_proto=-1,
               frag_offset=-1, udp_sport=-1, udp_dport=-1, nicrig_kind=-1, seq=-1)
    if isinstance(pkt, Dot3):
        rec["ethertype"] = rec["inner_ethertype"] = pkt.len
        return rec
    rec["ethertype"] = rec["inner_ethertype"] = pkt.type
    tag = pkt.payload
    if isinstance(tag, (Dot1Q, Dot1AD)):
        rec["vlan"] = tag.vlan
        while isinstance(tag, (Dot1Q, Dot1AD)):
            rec["inner_ethertype"] = tag.type
            tag = tag.payload
    if MACControlPause in pkt:
        q = pkt[MACControlPause].pause_time
        ns = q * 512 * 1e9 / link_rate
        rec["pause_quanta"], rec["pause_ns"] = q, int(ns) if ns == int(ns) else ns
    if MACControlClassBasedFlowControl in pkt:
        c = pkt[MACControlClassBasedFlowControl]
        rec["pfc"] = [getattr(c, f"c{i}_pause_time") for i in range(8)]
    if IP in pkt:
        ip = pkt[IP]
        rec.update(ip_src=ip.src, ip_dst=ip.dst, ip_proto=ip.proto, frag_offset=ip.frag)
        if UDP in pkt and ip.frag == 0:
            rec.update(udp_sport=pkt[UDP].sport, udp_dport=pkt[UDP].dport)
            hdr = parse_header(bytes(pkt[UDP].payload))
            if hdr is not None:
                rec.update(nicrig_kind=hdr.kind, seq=hdr.seq)
    return rec


def expected_records(frames: list[tuple[int, int, bytes, tuple[int, ...]]], **kw) -> list[dict]:
    """:func:`expected_record` per frame; later IPv4 fragments take the nicrig kind and seq of
    their datagram's first fragment (same source, destination, protocol and id)."""
    out, first = [], {}
    for ss, es, data, er_at in frames:
        rec = expected_record(ss, es, data, er_at, **kw)
        pkt = Ether(data[:-4])
        if IP in pkt:
            key = (pkt[IP].src, pkt[IP].dst, pkt[IP].proto, pkt[IP].id)
            if pkt[IP].frag == 0 and pkt[IP].flags.MF:
                first[key] = (rec["nicrig_kind"], rec["seq"])
            elif pkt[IP].frag and key in first:
                rec["nicrig_kind"], rec["seq"] = first[key]
        out.append(rec)
    return out


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Lane, Path]:
    lane = mixed_lane()
    path = write_session(tmp_path_factory.mktemp("eth") / "mixed.sr", CHANNELS, lane.state_bits(), STATE_RATE)
    return lane, path


def records(path: Path, gmii_spec: str | None = None, eth_options: dict | None = None) -> list[dict]:
    res = run_sigrok(path, [gmii_spec or gmii(), decoder_spec("ethernet", None, eth_options)],
                     binary="ethernet=records").check()
    return res.json_lines()


def assert_records(got: list[dict], want: list[dict]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert BRIEF_KEYS <= set(g)
        assert g == w


# -- records -----------------------------------------------------------------------------------

def test_records_match_scapy_dissection(mixed: tuple[Lane, Path]) -> None:
    lane, path = mixed
    got = records(path)
    assert_records(got, expected_records(lane.frames))
    # Spot checks in plain numbers, independent of the helper above.
    assert got[0]["nicrig_kind"] == 1 and got[0]["seq"] == 1 and got[0]["udp_dport"] == 5001
    assert got[1]["length"] == 64 and got[1]["nicrig_kind"] == 2
    assert (got[2]["pause_quanta"], got[2]["pause_ns"], got[2]["ethertype"]) == (0x1234, 0x1234 * 512, 0x8808)
    assert got[3]["pause_quanta"] == 0 and got[3]["pause_ns"] == 0
    assert got[4]["pfc"] == [0, 1, 2, 0x100, 4, 5, 6, 0xFFFF] and got[4]["pause_quanta"] == -1
    assert (got[5]["vlan"], got[5]["ethertype"], got[5]["inner_ethertype"], got[5]["seq"]) == (42, 0x8100, 0x0800, 3)
    assert (got[6]["vlan"], got[6]["ethertype"], got[6]["inner_ethertype"]) == (100, 0x88A8, 0x0800)
    assert [r["frag_offset"] for r in got[7:10]] == [0, 185, 370]
    assert [r["seq"] for r in got[7:10]] == [77, 77, 77] and got[8]["udp_dport"] == -1
    assert got[10]["udp_sport"] == 7 and got[10]["nicrig_kind"] == -1
    assert got[11]["fcs_ok"] is False and got[11]["seq"] == 5
    assert got[12]["fcs_ok"] is True and got[12]["error_octets"] == 2
    assert got[13]["ethertype"] == 0x0806 and got[13]["dst"] == "ff:ff:ff:ff:ff:ff"
    assert got[14]["ethertype"] == 38  # an 802.3 length field
    # ss / es: first preamble clock, first idle clock after the FCS.
    assert got[0]["ss"] == 20 and got[0]["es"] == 20 + 8 + got[0]["length"]
    assert got[1]["ss"] == got[0]["es"] + 12


def test_link_rate_scales_pause_time(mixed: tuple[Lane, Path]) -> None:
    lane, path = mixed
    got = records(path, eth_options={"link_rate": "1e8"})
    assert got[2]["pause_ns"] == pytest.approx(0x1234 * 5120)
    got = records(path, eth_options={"link_rate": "1e10"})
    assert got[2]["pause_ns"] == pytest.approx(0x1234 * 51.2)


def test_rx_direction_label(mixed: tuple[Lane, Path]) -> None:
    _, path = mixed
    got = records(path, gmii({"direction": "rx"}))
    assert {r["direction"] for r in got} == {"rx"}


# -- pcap --------------------------------------------------------------------------------------

def test_pcap_reads_back_in_scapy_and_tshark(mixed: tuple[Lane, Path], tmp_path: Path) -> None:
    lane, path = mixed
    res = run_sigrok(path, [gmii(), "ethernet"], binary="ethernet=pcap").check()
    pcap = tmp_path / "x.pcap"
    pcap.write_bytes(res.binary)
    assert res.binary[:4] == bytes.fromhex("d4c3b2a1")  # classic microsecond pcap, little-endian
    assert int.from_bytes(res.binary[20:24], "little") == 1  # LINKTYPE_ETHERNET
    pkts = rdpcap(str(pcap))
    assert [bytes(p) for p in pkts] == [data[:-4] for _, _, data, _ in lane.frames]
    for p, (ss, _, _, _) in zip(pkts, lane.frames):
        assert float(p.time) == pytest.approx(ss / STATE_RATE, abs=1e-6)
    if shutil.which("tshark") is None:
        pytest.skip(reason="tshark not installed")
    out = subprocess.run(["tshark", "-r", str(pcap), "-T", "fields", "-e", "eth.dst", "-e", "udp.dstport",
                          "-e", "frame.len", "-e", "ip.frag_offset"],
                         capture_output=True, text=True, check=True).stdout
    rows = [line.split("\t") for line in out.splitlines()]
    assert len(rows) == len(lane.frames)
    for row, (_, _, data, _) in zip(rows, lane.frames):
        pkt = Ether(data[:-4])
        assert row[0] == pkt.dst and int(row[2]) == len(data) - 4
        if UDP in pkt and pkt[IP].frag == 0 and not pkt[IP].flags.MF:  # tshark reassembles fragments
            assert int(row[1]) == pkt[UDP].dport
        if IP in pkt:
            assert int(row[3]) == pkt[IP].frag


def test_pcap_nanosecond_resolution(tmp_path: Path) -> None:
    lane = Lane().idle(1001)
    lane.frame(nicrig_udp(1, 1))
    lane.frame(nicrig_udp(1, 2))
    path = write_session(tmp_path / "ns.sr", CHANNELS, lane.state_bits(), STATE_RATE)
    res = run_sigrok(path, [gmii(), decoder_spec("ethernet", None, {"pcap_resolution": "ns"})],
                     binary="ethernet=pcap").check()
    assert res.binary[:4] == bytes.fromhex("4d3cb2a1")
    pcap = tmp_path / "ns.pcap"
    pcap.write_bytes(res.binary)
    pkts = rdpcap(str(pcap))
    assert [int(round(float(p.time) * 1e9)) for p in pkts] == [ss * 8 for ss, _, _, _ in lane.frames]


# -- annotations -------------------------------------------------------------------------------

def test_annotations(mixed: tuple[Lane, Path]) -> None:
    _, path = mixed
    res = run_sigrok(path, [gmii(), "ethernet"], annotations="gmii,ethernet").check()
    eth = [a.text for a in res.annotations if a.instance.startswith("ethernet")]
    g = [a for a in res.annotations if a.instance.startswith("gmii")]
    assert not any("Internal error" in t for t in eth)
    assert any(t.startswith("PAUSE pause_time 4660 quanta = 2.38592 ms") for t in eth)
    assert any("(resume)" in t for t in eth)
    assert any(t.startswith("Priority enable vector 0x0089: classes 0,3,7") for t in eth)
    assert any(t.startswith("Class 7: 65535 quanta") for t in eth)
    assert any(t.startswith("Class 1: 1 quanta") and "not enabled" in t for t in eth)
    assert any(t.startswith("802.1Q C-VLAN tag (0x8100): VID 42, PCP 5") for t in eth)
    assert any(t.startswith("802.1ad S-VLAN tag (0x88A8): VID 100") for t in eth)
    assert any(t.startswith("nicrig response, seq 3, test 4242") for t in eth)
    assert any(t.startswith("IPv4 10.0.0.1 -> 10.0.0.2, UDP") and "fragment offset 185 (1480 octets), MF 1" in t
               for t in eth)
    assert any(t.startswith("Length 38") for t in eth)
    gt = [a.text for a in g]
    n = len(mixed[0].frames)
    assert gt.count("Preamble (7 octets)") == n and gt.count("Start frame delimiter") == n
    assert sum(t.startswith("FCS 0x") and t.endswith(" OK") for t in gt) == n - 1
    assert sum("wrong (calculated" in t for t in gt) == 1
    assert gt.count("Transmit error propagation (TX_ER)") == 2
    assert "IFG 12 clocks (96 ns)" in gt and "IFG 40 clocks (320 ns)" in gt
    assert not any(t.startswith("Runt") or "Short" in t for t in gt)
    # Octets: D<0> is the LSB; the first octet after the SFD is the destination's first.
    first = next(a for a in g if a.text.startswith("Octet 0:"))
    assert first.text == "Octet 0: 0x02" and (first.ss, first.es) == (28, 29)


def test_error_symbols_and_warnings(tmp_path: Path) -> None:
    """RX side: false carrier, carrier extend (+ error), LPI; missing SFD, junk, runt, short IFG."""
    path = write_session(tmp_path / "err.sr", CHANNELS, error_symbols_lane().state_bits(), STATE_RATE)
    res = run_sigrok(path, [gmii({"direction": "rx"}), "ethernet"], annotations="gmii,ethernet").check()
    gt = res.texts()
    assert "False carrier indication (0x0E, 3 clocks)" in gt
    assert "Carrier extend (0x0F, 4 clocks)" in gt and "Carrier extend error (0x1F, 1 clocks)" in gt
    assert "Assert LPI (0x01, 6 clocks)" in gt
    assert "EN high for 9 clocks without an SFD" in gt
    assert "3 unexpected octet(s) before the SFD: 55 55 99" not in gt  # 0x55s are preamble
    assert "1 unexpected octet(s) before the SFD: 99" in gt
    assert "Runt frame: 44 octets (minimum 64)" in gt
    assert any(t.startswith("Inter-frame gap of 4 clocks") for t in gt)
    assert not any(t.startswith("Preamble of") for t in gt)  # RX: preamble length is not checked
    got = run_sigrok(path, [gmii({"direction": "rx"}), "ethernet"], binary="ethernet=records").check().json_lines()
    assert [r["length"] for r in got] == [len(nicrig_udp(1, 1)), 44, 64, 64]
    assert [r["pause_quanta"] for r in got] == [-1, -1, 7, 8] and all(r["fcs_ok"] for r in got)
    assert got[1]["ethertype"] == 0 and got[1]["dst"] == "00:00:00:00:00:00"


def test_tx_preamble_length_checked(tmp_path: Path) -> None:
    path = write_session(tmp_path / "pre.sr", CHANNELS, short_preamble_lane().state_bits(), STATE_RATE)
    res = run_sigrok(path, [gmii()], annotations="gmii").check()
    assert "Preamble of 3 octets (802.3: 7 before the SFD)" in res.texts()


def test_truncated_frame_at_end_of_capture(tmp_path: Path) -> None:
    path = write_session(tmp_path / "trunc.sr", CHANNELS, truncated_lane().state_bits(), STATE_RATE)
    got = records(path)
    assert [r["seq"] for r in got] == [1, -1] and got[1]["pause_quanta"] == 3
    res = run_sigrok(path, [gmii(), "ethernet"], annotations="gmii,ethernet").check()
    assert "Capture ends inside the frame (100 octets after the SFD)" in res.texts()
    assert any(t.startswith("TX: UDP 10.0.0.1:40000 -> 10.0.0.2:5001, nicrig stream #2") and "truncated" in t
               for t in res.texts())
    pcap = run_sigrok(path, [gmii(), "ethernet"], binary="ethernet=pcap").check().binary
    (tmp_path / "t.pcap").write_bytes(pcap)
    assert len(rdpcap(str(tmp_path / "t.pcap"))) == 2


# -- timing capture with GTX_CLK -----------------------------------------------------------------

def test_timing_capture_with_clock(tmp_path: Path) -> None:
    lane = timing_lane()
    path = write_session(tmp_path / "clk.sr", CLK_CHANNELS, lane.timing_bits(), 2 * STATE_RATE)
    spec = gmii(pins={**PIN_MAP, "clk": "GTX_CLK"})
    got = records(path, spec)
    # A clock's octet is sampled on its rising edge, the second sample of the clock.
    assert_records(got, expected_records([(2 * ss + 1, 2 * es + 1, d, er) for ss, es, d, er in lane.frames]))
    res = run_sigrok(path, [spec], annotations="gmii").check()
    assert "IFG 12 clocks (96 ns)" in res.texts() and "IFG 25 clocks (200 ns)" in res.texts()
    pcap = run_sigrok(path, [spec, "ethernet"], binary="ethernet=pcap").check().binary
    (tmp_path / "clk.pcap").write_bytes(pcap)
    assert [bytes(p) for p in rdpcap(str(tmp_path / "clk.pcap"))] == [d[:-4] for _, _, d, _ in lane.frames]
    # The same capture, forced to one sample per clock, sees every octet twice: no valid frame.
    forced = records(path, gmii({"clock": "state"}, pins={**PIN_MAP, "clk": "GTX_CLK"}))
    assert not any(r["fcs_ok"] for r in forced)


def test_without_er_channel(mixed: tuple[Lane, Path]) -> None:
    lane, path = mixed
    pins = {k: v for k, v in PIN_MAP.items() if k != "er"}
    got = records(path, gmii(pins=pins))
    assert len(got) == len(lane.frames) and all(r["error_octets"] == 0 for r in got)


# -- robustness ----------------------------------------------------------------------------------

def _clean(res) -> None:
    assert res.returncode == 0, res.stderr
    assert "Traceback" not in res.stderr, res.stderr
    assert "Internal error" not in res.stdout.decode("utf-8", "replace")


def test_random_bits_state_and_timing(tmp_path: Path) -> None:
    rng = np.random.default_rng(2024)
    for i, (p_en, n) in enumerate([(0.5, 20000), (0.97, 20000)]):
        path = write_session(tmp_path / f"rnd{i}.sr", CLK_CHANNELS, random_bits(rng, p_en, n), 2 * STATE_RATE)
        for spec in (gmii(), gmii(pins={**PIN_MAP, "clk": "GTX_CLK"})):
            _clean(run_sigrok(path, [spec, "ethernet"], annotations="gmii,ethernet"))
            res = run_sigrok(path, [spec, "ethernet"], binary="ethernet=records")
            _clean(res)
            for r in res.json_lines():
                assert BRIEF_KEYS <= set(r)


def test_garbage_frames_with_valid_fcs(tmp_path: Path) -> None:
    """Mutated headers (wrong lengths, IHL, truncated IPv4/UDP/MAC Control) with a correct FCS."""
    path = write_session(tmp_path / "garbage.sr", CHANNELS, garbage_lane().state_bits(), STATE_RATE)
    _clean(run_sigrok(path, [gmii(), "ethernet"], annotations="gmii,ethernet"))
    res = run_sigrok(path, [gmii(), "ethernet"], binary="ethernet=records")
    _clean(res)
    assert len(res.json_lines()) == 120 and all(r["fcs_ok"] for r in res.json_lines())


def test_truncated_captures_at_random_points(mixed: tuple[Lane, Path], tmp_path: Path) -> None:
    lane, _ = mixed
    bits = lane.state_bits()
    rnd = random.Random(11)
    cuts = [1, 2, 9, 27, 28, 30] + [rnd.randrange(len(bits)) for _ in range(6)]
    for cut in cuts:
        path = write_session(tmp_path / f"cut{cut}.sr", CHANNELS, bits[:cut], STATE_RATE)
        res = run_sigrok(path, [gmii(), "ethernet"], binary="ethernet=records")
        _clean(res)
        done = [f for f in lane.frames if f[1] < cut]
        assert [r["ss"] for r in res.json_lines()] == [f[0] for f in done]
        # Starting mid-capture: the first frame is partial and is never reported.
        path = write_session(tmp_path / f"tail{cut}.sr", CHANNELS, bits[cut:], STATE_RATE)
        res = run_sigrok(path, [gmii(), "ethernet"], binary="ethernet=records")
        _clean(res)
        # A frame cut inside its preamble still has its SFD: it is decoded.
        assert len(res.json_lines()) == sum(1 for f in lane.frames if f[0] + 7 >= cut)


# -- against nicrig's own GMII model -------------------------------------------------------------

def test_matches_the_simulated_rig_truth(tmp_path: Path) -> None:
    """Both directions of acquisition/sim's GMII rendering decode to its truth table."""
    rng = np.random.default_rng(1)
    frames = []
    for s in range(4):
        frames += sim_eth.udp_frames(make_payload(100 + 700 * s, Kind.STREAM, s, 9, rng), src_mac=A_MAC,
                                     dst_mac=B_MAC, src_ip="10.0.0.1", dst_ip="10.0.0.2", sport=1, dport=2,
                                     ip_id=s, vlan=7 if s == 2 else None)
    frames += [sim_eth.pause_frame(A_MAC, 99), sim_eth.pfc_frame(A_MAC, 0x81, [1, 2, 3, 4, 5, 6, 7, 8])]
    frames[1] = replace(frames[1], error_at=(5, 6))
    frames[3] = sim_eth.corrupt_fcs(frames[3])

    def schedule(fs: list, t: int, ifg: int) -> list:
        out = []
        for f in fs:
            out.append((t, f))
            t += 8 + len(f.data) + ifg
        return out

    tx = schedule(frames, 10, 12)
    rx = schedule(frames[4:] + frames[:4], 3, 13)  # the other direction: other order, overlapping
    renderer = sim_gmii.GmiiRenderer(tx, rx)
    path = tmp_path / "sim.sr"
    from nicrig.acquisition.srzip import write_sr
    write_sr(path, list(sim_gmii.CHANNELS), STATE_RATE, [renderer.render(0, renderer.end_clock + 5)])
    truth = renderer.truth()
    for direction, en, er, d in (("tx", "TX_EN", "TX_ER", "TXD"), ("rx", "RX_DV", "RX_ER", "RXD")):
        pins = {"en": en, "er": er, **{f"d{i}": f"{d}[{i}]" for i in range(8)}}
        got = records(path, gmii({"direction": direction}, pins))
        rows = [r for r in truth if r["direction"].decode() == direction]
        assert len(got) == len(rows) == 8  # two datagrams are fragmented
        for g, r in zip(got, rows):
            want = dict(ss=int(r["ss"]), es=int(r["es"]), direction=direction, length=int(r["length"]),
                        dst=r["dst"].decode(), src=r["src"].decode(), ethertype=int(r["ethertype"]),
                        vlan=int(r["vlan_id"]), inner_ethertype=int(r["inner_ethertype"]), seq=int(r["seq"]),
                        pause_quanta=int(r["pause_quanta"]), fcs_ok=bool(r["fcs_ok"]),
                        frag_offset=int(r["ip_fragment_offset"]), error_octets=int(r["error_octets"]))
            assert {k: g[k] for k in want} == want
