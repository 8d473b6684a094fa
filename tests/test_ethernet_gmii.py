"""Frames (acquisition/sim/ethernet.py) and their GMII rendering (acquisition/sim/gmii.py) against
IEEE 802.3, checked with independent references: a bit-serial clause 3.2.9 CRC, Scapy's parsers,
an RFC 768 checksum written here, sigrok-style bit packing and tshark. The fast, template-based
udp_frames is checked byte for byte against frames Scapy builds directly."""

from __future__ import annotations

import random
import shutil
import socket
import struct
import subprocess
import zlib
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from nicrig.acquisition.capture import pack_bits, unpack_bits
from nicrig.acquisition.sim import _inet
from nicrig.acquisition.sim import ethernet as eth
from nicrig.acquisition.sim.ethernet import (
    Frame,
    corrupt_fcs,
    fcs,
    frame_time_on_wire_ns,
    pause_frame,
    pause_time_ns,
    pfc_frame,
    udp_frames,
    wire_time_ns,
)
from nicrig.acquisition.sim.gmii import (
    CHANNELS,
    FRAME_TRUTH_DTYPE,
    IFG_CLOCKS,
    GmiiRenderer,
)
from nicrig.udpmon.payload import HEADER_BYTES, Kind, make_payload, parse_header
from scapy.contrib.mac_control import MACControlClassBasedFlowControl, MACControlPause
from scapy.layers.inet import IP, UDP, fragment
from scapy.layers.l2 import Dot1Q, Ether
from scapy.packet import Raw
from scapy.utils import checksum, wrpcap

A_MAC, B_MAC = "02:00:00:00:00:0a", "02:00:00:00:00:0b"
FLOW = dict(src_mac=A_MAC, dst_mac=B_MAC, src_ip="10.0.0.1", dst_ip="10.0.0.2", sport=40000, dport=5001)


def payload(size: int, seq: int = 7) -> bytes:
    return make_payload(size, Kind.STREAM, seq, test_id=99, rng=np.random.default_rng(seq))


def udp(size: int, seq: int = 7, **kw: object) -> list[Frame]:
    return udp_frames(payload(size, seq), **FLOW, ip_id=seq & 0xFFFF, **kw)  # type: ignore[arg-type]


# -- independent references ---------------------------------------------------------------------

def crc_clause_3_2_9(octets: bytes) -> bytes:
    """The FCS by the letter of 802.3 clause 3.2.9: bits LSB first per octet, the first 32
    complemented, M(x)*x^32 mod G(x), complemented, sent x^31 first; regrouped into octets."""
    reg = 0
    for k, octet in enumerate(octets):
        for j in range(8):
            bit = (octet >> j) & 1
            if k < 4:
                bit ^= 1
            feedback = (reg >> 31) ^ bit
            reg = (reg << 1) & 0xFFFFFFFF
            if feedback:
                reg ^= 0x04C11DB7
    fcs_bits = [((~reg) >> (31 - i)) & 1 for i in range(32)]  # transmission order
    return bytes(sum(fcs_bits[8 * k + j] << j for j in range(8)) for k in range(4))


def internet_checksum(data: bytes) -> int:
    """RFC 1071 ones'-complement sum."""
    if len(data) % 2:
        data += b"\x00"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return total


def udp_checksum_ok(src_ip: bytes, dst_ip: bytes, segment: bytes) -> bool:
    """RFC 768: the sum over pseudo-header and segment (checksum included) is all ones."""
    pseudo = src_ip + dst_ip + struct.pack("!BBH", 0, 17, len(segment))
    return internet_checksum(pseudo + segment) == 0xFFFF


def scapy_udp_frames(payload: bytes, *, src_mac: str, dst_mac: str, src_ip: str, dst_ip: str, sport: int,
                     dport: int, ip_id: int, mtu: int = 1500, vlan: int | None = None) -> list[bytes]:
    """The frames built directly by Scapy, no template: Ether [/ Dot1Q] / IP / UDP / Raw, cut by
    Scapy's fragment into IP packets of at most ``mtu`` bytes, padded to 60 bytes, FCS appended."""
    link = Ether(dst=dst_mac, src=src_mac)
    if vlan is not None:
        link = link / Dot1Q(vlan=vlan)
    packet = link / IP(src=src_ip, dst=dst_ip, id=ip_id) / UDP(sport=sport, dport=dport) / Raw(payload)
    out = []
    for piece in fragment(packet, fragsize=mtu - 20):
        body = bytes(piece).ljust(60, b"\x00")
        out.append(body + zlib.crc32(body).to_bytes(4, "little"))
    return out


# -- ethernet.py ---------------------------------------------------------------------------------

def test_fcs_is_the_clause_3_2_9_crc_and_leaves_the_residue() -> None:
    rng = np.random.default_rng(3)
    for size in (14, 60, 61, 1514):
        body = rng.integers(0, 256, size, dtype=np.uint8).tobytes()
        assert fcs(body) == crc_clause_3_2_9(body)
        assert eth.fcs_ok(body + fcs(body))
    for frame in (*udp(1400), pause_frame(A_MAC, 1), pfc_frame(A_MAC, 1, [1] * 8)):
        assert frame.fcs_ok and frame.data[-4:] == crc_clause_3_2_9(frame.data[:-4])


def test_udp_frame_reparses_identically_in_scapy() -> None:
    (frame,) = udp(1400, seq=123)
    pkt = Ether(frame.data[:-4])
    assert bytes(pkt) == frame.data[:-4]
    assert (pkt.dst, pkt.src, pkt.type) == (B_MAC, A_MAC, 0x0800)
    assert (pkt[IP].src, pkt[IP].dst, pkt[IP].id, pkt[IP].len, pkt[IP].flags, pkt[IP].frag) == (
        "10.0.0.1", "10.0.0.2", 123, 1428, 0, 0)
    assert (pkt[UDP].sport, pkt[UDP].dport, pkt[UDP].len) == (40000, 5001, 1408)
    assert bytes(pkt[UDP].payload) == payload(1400, 123)
    assert internet_checksum(frame.data[14:34]) == 0xFFFF  # IPv4 header checksum
    assert udp_checksum_ok(frame.data[26:30], frame.data[30:34], frame.data[34:-4])
    assert (frame.kind, frame.seq, frame.pause_quanta, frame.dst, frame.src, frame.ethertype) == (
        "udp", 123, -1, B_MAC, A_MAC, 0x0800)


def test_wire_times_of_a_1400_byte_payload() -> None:
    (frame,) = udp(1400)
    assert len(frame.data) == 1446  # 14 + 20 + 8 + 1400 + 4
    assert frame_time_on_wire_ns(len(frame.data)) == pytest.approx(11_632.0)  # (8 + 1446) B x 8 ns
    assert wire_time_ns(len(frame.data)) == pytest.approx(11_728.0)  # + 12 B IFG
    assert wire_time_ns(len(frame.data), rate_bps=100e6) == pytest.approx(117_280.0)


def test_largest_unfragmented_payload_fills_1538_byte_times() -> None:
    frames = udp(1472)
    assert [len(f.data) for f in frames] == [1518]
    assert wire_time_ns(1518) == pytest.approx(1538 * 8)


def test_short_payloads_make_64_byte_frames() -> None:
    (frame,) = udp(18, seq=5)  # 14 + 20 + 8 + 18 = 60: exactly the minimum, no pad
    assert len(frame.data) == eth.MIN_FRAME_BYTES
    pkt = Ether(frame.data[:-4])
    assert (pkt[IP].len, pkt[UDP].len) == (46, 26)
    assert frame.seq == 5 and bytes(pkt[UDP].payload) == payload(18, 5)
    (tiny,) = udp(1)  # 43 bytes before the pad: 17 zero octets follow the IP packet (clause 3.2.8)
    assert len(tiny.data) == 64 and tiny.data[43:-4] == bytes(17) and tiny.seq == -1
    assert Ether(tiny.data[:-4])[IP].len == 29
    assert udp_checksum_ok(tiny.data[26:30], tiny.data[30:34], tiny.data[34:43])


def test_3000_byte_payload_is_fragmented_into_three() -> None:
    frames = udp(3000, seq=77)
    ips = [Ether(f.data[:-4])[IP] for f in frames]
    assert [len(f.data) for f in frames] == [1518, 1518, 86]
    assert [ip.frag for ip in ips] == [0, 185, 370]  # 8-byte units
    assert [f.ip_fragment_offset for f in frames] == [0, 185, 370]
    assert [int(ip.flags) & 1 for ip in ips] == [1, 1, 0]  # MF
    assert [f.ip_more_fragments for f in frames] == [True, True, False]
    assert {ip.id for ip in ips} == {77} and all(ip.proto == 17 for ip in ips)
    assert all(internet_checksum(f.data[14:34]) == 0xFFFF for f in frames)
    assert [f.seq for f in frames] == [77, 77, 77] and {f.kind for f in frames} == {"udp"}
    datagram = b"".join(f.data[34:34 + ip.len - 20] for f, ip in zip(frames, ips))
    assert len(datagram) == 3008 and datagram[8:] == payload(3000, 77)
    assert struct.unpack("!H", datagram[4:6])[0] == 3008
    assert udp_checksum_ok(frames[0].data[26:30], frames[0].data[30:34], datagram)
    assert parse_header(datagram[8:24]).seq == 77  # type: ignore[union-attr]


def test_smaller_mtu_and_vlan_tag() -> None:
    frames = udp(1000, mtu=576, vlan=42)
    assert len(frames) == 2
    for f in frames:
        pkt = Ether(f.data[:-4])
        assert pkt.type == 0x8100 and pkt[Dot1Q].vlan == 42 and pkt[Dot1Q].type == 0x0800
        assert pkt[IP].len <= 576 and (f.vlan_id, f.inner_ethertype, f.ethertype) == (42, 0x0800, 0x8100)
    assert [f.ip_fragment_offset for f in frames] == [0, 552 // 8]
    assert [f.ip_more_fragments for f in frames] == [True, False]
    assert not pause_frame("00:60:1d:00:00:01", 7).ip_more_fragments  # no IPv4 in it
    (tagged,) = udp(18, vlan=1)  # the tag adds 4 bytes; padding only ever reaches 64
    (small,) = udp(1, vlan=1)
    assert (len(tagged.data), len(small.data)) == (68, 64) and small.fcs_ok
    with pytest.raises(ValueError):
        udp(100, mtu=60)
    with pytest.raises(ValueError):
        udp(100, vlan=4096)


def test_pause_frame_layout_annex_31b() -> None:
    f = pause_frame(A_MAC, 0x1234)
    expected = (bytes.fromhex("0180c2000001") + bytes.fromhex("02000000000a") + b"\x88\x08"
                + b"\x00\x01" + b"\x12\x34" + bytes(42))
    assert f.data[:-4] == expected and len(f.data) == 64 and f.fcs_ok
    assert (f.kind, f.pause_quanta, f.seq, f.ethertype) == ("pause", 0x1234, -1, 0x8808)
    assert Ether(f.data[:-4])[MACControlPause].pause_time == 0x1234
    assert pause_time_ns(0xFFFF) == pytest.approx(0xFFFF * 512.0)
    assert pause_time_ns(1, rate_bps=100e6) == pytest.approx(5120.0)
    with pytest.raises(ValueError):
        pause_frame(A_MAC, 0x10000)


def test_pfc_frame_layout() -> None:
    times = [0, 1, 2, 0x100, 4, 5, 6, 0xFFFF]
    f = pfc_frame(A_MAC, 0b1000_1001, times)
    expected = (bytes.fromhex("0180c2000001 02000000000a 8808 0101 0089")
                + b"".join(t.to_bytes(2, "big") for t in times) + bytes(26))
    assert f.data[:-4] == expected and len(f.data) == 64 and f.fcs_ok
    assert (f.kind, f.pause_quanta) == ("pfc", -1)
    cbfc = Ether(f.data[:-4])[MACControlClassBasedFlowControl]
    assert (cbfc.c7_enabled, cbfc.c3_enabled, cbfc.c0_enabled, cbfc.c1_enabled) == (1, 1, 1, 0)
    assert (cbfc.c0_pause_time, cbfc.c3_pause_time, cbfc.c7_pause_time) == (0, 0x100, 0xFFFF)
    with pytest.raises(ValueError):
        pfc_frame(A_MAC, 0x100, times)
    with pytest.raises(ValueError):
        pfc_frame(A_MAC, 1, times[:7])


def test_corrupt_fcs_and_frame_validation() -> None:
    (good,) = udp(100)
    bad = corrupt_fcs(good)
    assert not bad.fcs_ok and bad.data[:-4] == good.data[:-4] and (bad.kind, bad.seq) == (good.kind, good.seq)
    with pytest.raises(ValueError):
        Frame(bytes(17))
    with pytest.raises(ValueError):
        Frame(good.data, kind="jumbo")
    with pytest.raises(ValueError):
        replace(good, error_at=(len(good.data),))


MACS = st.binary(min_size=6, max_size=6).map(lambda b: b.hex(":"))
IPV4 = st.ip_addresses(v=4).map(str)
U16 = st.integers(0, 0xFFFF)  # ports and IP identifications
EDGE_SIZES = (1, 17, 18, 1472, 1473, 2961, 2962, 8972, 8973, 9000)


def random_payload(size: int, rnd: random.Random, headed: bool) -> tuple[bytes, int]:
    """Random bytes of ``size``, led by a nicrig header when ``headed`` (and it fits); the seq expected."""
    if headed and size >= HEADER_BYTES:
        seq = rnd.getrandbits(32)
        return make_payload(size, Kind.STREAM, seq, test_id=5, rng=np.random.default_rng(rnd.getrandbits(32))), seq
    return rnd.randbytes(size), -1


@settings(max_examples=150, deadline=None)
@given(size=st.one_of(st.sampled_from(EDGE_SIZES), st.integers(1, 9000)),
       mtu=st.sampled_from([68, 576, 1499, 1500, 9000]), vlan=st.one_of(st.none(), st.integers(0, 0xFFF)),
       ip_ids=st.tuples(U16, U16), seed=st.integers(0, 2**32), headed=st.booleans(), macs=st.tuples(MACS, MACS),
       ips=st.tuples(IPV4, IPV4), ports=st.tuples(U16, U16))
@example(size=17, mtu=1500, vlan=None, ip_ids=(0, 0xFFFF), seed=1, headed=True, macs=(A_MAC, B_MAC),
         ips=("10.0.0.1", "10.0.0.2"), ports=(40000, 5001))
@example(size=18, mtu=1500, vlan=1, ip_ids=(1, 2), seed=2, headed=True, macs=(A_MAC, B_MAC),
         ips=("10.0.0.1", "10.0.0.2"), ports=(40000, 5001))
@example(size=1472, mtu=1500, vlan=None, ip_ids=(3, 4), seed=3, headed=True, macs=(A_MAC, B_MAC),
         ips=("10.0.0.1", "10.0.0.2"), ports=(40000, 5001))
@example(size=1473, mtu=1500, vlan=4095, ip_ids=(5, 6), seed=4, headed=False, macs=(A_MAC, B_MAC),
         ips=("10.0.0.1", "10.0.0.2"), ports=(40000, 5001))
@example(size=2961, mtu=1500, vlan=None, ip_ids=(7, 8), seed=5, headed=True, macs=(A_MAC, B_MAC),
         ips=("10.0.0.1", "10.0.0.2"), ports=(40000, 5001))
@example(size=2962, mtu=576, vlan=42, ip_ids=(9, 10), seed=6, headed=True, macs=(A_MAC, B_MAC),
         ips=("10.0.0.1", "10.0.0.2"), ports=(40000, 5001))
@example(size=9000, mtu=9000, vlan=None, ip_ids=(11, 12), seed=7, headed=True, macs=(A_MAC, B_MAC),
         ips=("10.0.0.1", "10.0.0.2"), ports=(40000, 5001))
def test_template_frames_equal_scapy_built_frames(size: int, mtu: int, vlan: int | None, ip_ids: tuple[int, int],
                                                  seed: int, headed: bool, macs: tuple[str, str],
                                                  ips: tuple[str, str], ports: tuple[int, int]) -> None:
    """Two packets of one flow shape (the second reuses the cached template) against Scapy's own build."""
    rnd = random.Random(seed)
    flow = {"src_mac": macs[0], "dst_mac": macs[1], "src_ip": ips[0], "dst_ip": ips[1],
            "sport": ports[0], "dport": ports[1], "mtu": mtu, "vlan": vlan}
    for ip_id in ip_ids:
        data, seq = random_payload(size, rnd, headed)
        frames = udp_frames(data, ip_id=ip_id, **flow)  # type: ignore[arg-type]
        assert [f.data for f in frames] == scapy_udp_frames(data, ip_id=ip_id, **flow)  # type: ignore[arg-type]
        assert all(f.kind == "udp" and f.seq == seq and f.pause_quanta == -1 and f.error_at == () for f in frames)
    info = eth._udp_template.cache_info()
    assert info.maxsize is not None and info.currsize <= info.maxsize


@pytest.mark.parametrize(("size", "mtu", "vlan"),
                         [(1400, 1500, None), (20, 1500, 3), (3000, 1500, None), (5000, 576, 9)])
def test_udp_checksum_computed_as_zero_is_sent_as_ffff(size: int, mtu: int, vlan: int | None) -> None:
    """RFC 768: a checksum that computes to 0 is sent as all ones (0 would mean "not computed")."""
    src_ip, dst_ip, sport, dport = FLOW["src_ip"], FLOW["dst_ip"], FLOW["sport"], FLOW["dport"]
    body = bytearray(random.Random(size).randbytes(size - 2)) + bytes(2)  # even size: the tail is one 16-bit word
    pseudo = socket.inet_aton(src_ip) + socket.inet_aton(dst_ip) + struct.pack("!BBH", 0, 17, 8 + size)
    header = struct.pack("!HHHH", sport, dport, 8 + size, 0)
    # Pick the tail word that brings the ones'-complement sum to 0xFFFF, so the checksum computes to 0.
    body[-2:] = (0xFFFF - internet_checksum(pseudo + header + bytes(body))).to_bytes(2, "big")
    data = bytes(body)
    assert internet_checksum(pseudo + header + data) == 0xFFFF
    frames = udp_frames(data, **FLOW, ip_id=1234, mtu=mtu, vlan=vlan)  # type: ignore[arg-type]
    udp_at = 14 + (4 if vlan is not None else 0) + 20
    assert frames[0].data[udp_at + 6:udp_at + 8] == b"\xff\xff"
    reference = scapy_udp_frames(data, **FLOW, ip_id=1234, mtu=mtu, vlan=vlan)  # type: ignore[arg-type]
    assert [f.data for f in frames] == reference
    datagram = b"".join(f.data[udp_at:udp_at + Ether(f.data[:-4])[IP].len - 20] for f in frames)
    assert datagram[8:] == data and udp_checksum_ok(socket.inet_aton(src_ip), socket.inet_aton(dst_ip), datagram)


# -- gmii.py -------------------------------------------------------------------------------------

def lines(packed: np.ndarray) -> dict[str, np.ndarray]:
    """Channel and vector values of packed samples, unpacked by capture.unpack_bits."""
    bits = unpack_bits(packed, len(CHANNELS)).astype(np.int64)
    out = {name: bits[:, i] for i, name in enumerate(CHANNELS)}
    for vec in ("TXD", "RXD"):
        out[vec] = sum(out[f"{vec}[{k}]"] << k for k in range(8))
    return out


def test_gmii_draws_preamble_sfd_and_frame_lsb_first() -> None:
    (tx_frame,) = udp(1400)
    rx_frame = pause_frame(B_MAC, 3)
    r = GmiiRenderer([(20, tx_frame)], [(5, rx_frame)])
    packed = r.render(0, 1600)
    assert packed.shape == (1600, 3) and packed.dtype == np.uint8
    v = lines(packed)
    span = 8 + len(tx_frame.data)
    assert np.array_equal(np.flatnonzero(v["TX_EN"]), np.arange(20, 20 + span))
    assert list(v["TXD"][20:28]) == [0x55] * 7 + [0xD5]
    assert bytes(v["TXD"][28:20 + span].astype(np.uint8)) == tx_frame.data
    assert np.array_equal(np.flatnonzero(v["RX_DV"]), np.arange(5, 5 + 72))
    assert bytes(v["RXD"][13:77].astype(np.uint8)) == rx_frame.data
    idle = v["TX_EN"] == 0
    assert not v["TXD"][idle].any() and not v["RXD"][v["RX_DV"] == 0].any()
    assert not v["TX_ER"].any() and not v["RX_ER"].any()
    # TXD[0] carries the first bit on the wire: 0x55 starts 1, 0, 1, 0...
    assert list(v["TXD[0]"][20:22]) == [1, 1] and list(v["TXD[1]"][20:22]) == [0, 0]


def test_gmii_packing_matches_pack_bits_and_blocks_concatenate() -> None:
    rng = np.random.default_rng(11)
    tx, rx, c = [], [], 3
    for i in range(40):
        (f,) = udp(int(rng.integers(18, 1473)), seq=i)
        tx.append((c, f))
        c += 8 + len(f.data) + IFG_CLOCKS + int(rng.integers(0, 30))
    c = 0
    for i in range(60):
        f = pause_frame(B_MAC, i) if i % 3 else udp(int(rng.integers(18, 400)), seq=1000 + i)[0]
        rx.append((c, f))
        c += 8 + len(f.data) + IFG_CLOCKS
    r = GmiiRenderer(tx[::-1], rx)  # schedules may come in any order
    whole = r.render(0, r.end_clock + 50)
    cuts = np.unique(np.concatenate([[0, len(whole)], rng.integers(0, len(whole), 25), [1, 2, 9, 10]]))
    blocks = [r.render(int(a), int(b)) for a, b in zip(cuts[:-1], cuts[1:])]
    assert np.array_equal(np.concatenate(blocks), whole)
    assert r.render(7, 7).shape == (0, 3)
    # Reference: every channel drawn one clock at a time, then packed by capture.pack_bits.
    bits = np.zeros((len(whole), len(CHANNELS)), dtype=np.uint8)
    for base, schedule in ((0, tx), (10, rx)):
        for start, f in schedule:
            octets = eth.PREAMBLE_SFD + f.data
            for k, octet in enumerate(octets):
                bits[start + k, base] = 1
                bits[start + k, base + 2:base + 10] = [(octet >> j) & 1 for j in range(8)]
    assert np.array_equal(pack_bits(bits), whole)


def test_gmii_rejects_overlap_and_short_gaps() -> None:
    f = pause_frame(A_MAC, 1)  # 72 clocks with preamble
    GmiiRenderer([(0, f), (72 + IFG_CLOCKS, f)], [])
    with pytest.raises(ValueError, match="idle clocks"):
        GmiiRenderer([(0, f), (72 + IFG_CLOCKS - 1, f)], [])
    with pytest.raises(ValueError, match="overlaps"):
        GmiiRenderer([], [(100, f), (60, f)])
    with pytest.raises(ValueError):
        GmiiRenderer([(-1, f)], [])
    with pytest.raises(TypeError):
        GmiiRenderer([(1.5, f)], [])  # type: ignore[list-item]
    with pytest.raises(ValueError):
        GmiiRenderer([], []).render(5, 4)


def test_gmii_error_injection_raises_tx_er_and_rx_er() -> None:
    (f,) = udp(100)
    r = GmiiRenderer([(10, replace(f, error_at=(0, 50, 51)))], [(4, replace(corrupt_fcs(f), error_at=(3,)))])
    v = lines(r.render(0, 300))
    assert list(np.flatnonzero(v["TX_ER"])) == [18, 68, 69]  # 10 + 8 + offset
    assert list(np.flatnonzero(v["RX_ER"])) == [15]
    assert bytes(v["TXD"][18:18 + len(f.data)].astype(np.uint8)) == f.data  # ER leaves the data alone
    truth = r.truth()
    assert list(truth["error_octets"]) == [1, 3] and list(truth["fcs_ok"]) == [False, True]


def test_gmii_truth_rows() -> None:
    frames = udp(3000, seq=31)
    tagged = udp(50, seq=32, vlan=7)[0]
    tx = [(0, frames[0]), (2000, frames[1]), (4000, frames[2]), (5000, tagged)]
    rx = [(0, pause_frame(B_MAC, 500)), (300, pfc_frame(B_MAC, 1, [9] * 8))]
    truth = GmiiRenderer(tx, rx).truth()
    assert truth.dtype == FRAME_TRUTH_DTYPE and len(truth) == 6
    assert list(truth["direction"]) == [b"tx", b"rx", b"rx", b"tx", b"tx", b"tx"]
    assert list(truth["ss"]) == [0, 0, 300, 2000, 4000, 5000]
    assert list(truth["es"] - truth["ss"]) == [8 + n for n in truth["length"]]
    assert list(truth["length"]) == [1518, 64, 64, 1518, 86, len(tagged.data)]
    assert list(truth["kind"]) == [b"udp", b"pause", b"pfc", b"udp", b"udp", b"udp"]
    assert list(truth["seq"]) == [31, -1, -1, 31, 31, 32]
    assert list(truth["pause_quanta"]) == [-1, 500, -1, -1, -1, -1]
    assert list(truth["ip_fragment_offset"]) == [0, -1, -1, 185, 370, 0]
    assert list(truth["ethertype"]) == [0x0800, 0x8808, 0x8808, 0x0800, 0x0800, 0x8100]
    assert list(truth["vlan_id"]) == [-1, -1, -1, -1, -1, 7]
    assert list(truth["inner_ethertype"]) == [0x0800, 0x8808, 0x8808, 0x0800, 0x0800, 0x0800]
    assert truth["dst"][0] == B_MAC.encode() and truth["src"][1] == B_MAC.encode()
    assert truth["dst"][1] == b"01:80:c2:00:00:01" and truth["fcs_ok"].all()


@settings(deadline=None, max_examples=60)
@given(raw=st.lists(st.tuples(st.binary(min_size=18, max_size=90), st.sampled_from(eth.KINDS),
                              st.sampled_from([b"\x08\x00", b"\x81\x00", b"\x88\x08", b"\x86\xdd"]),
                              st.booleans(), st.integers(-1, 2**40), st.integers(-1, 65535)), min_size=1, max_size=12))
def test_gmii_truth_columns_are_what_each_frame_says(raw) -> None:
    """Every truth column, read from all frames' headers at once, is what the Frame's own properties give:
    tagged and untagged, IPv4 or not, runts too short for an IPv4 header, bad FCS and error octets."""
    frames, clock = [], 0
    for data, kind, ethertype, inner_ipv4, seq, quanta in raw:
        data = data[:12] + ethertype + data[14:]
        if ethertype == b"\x81\x00" and inner_ipv4 and len(data) >= 18:
            data = data[:16] + b"\x08\x00" + data[18:]
        frames.append((clock, Frame(data, kind=kind, seq=seq, pause_quanta=quanta,
                                    error_at=tuple(range(0, len(data), 7)) if seq % 3 == 0 else ())))
        clock += len(data) + 8 + 12
    truth = GmiiRenderer(frames, []).truth()
    for row, (ss, f) in zip(truth, frames):
        assert row["ss"] == ss and row["length"] == len(f.data) and row["direction"] == b"tx"
        assert (row["dst"], row["src"]) == (f.dst.encode(), f.src.encode())
        assert (row["ethertype"], row["vlan_id"], row["inner_ethertype"]) == (f.ethertype, f.vlan_id,
                                                                              f.inner_ethertype)
        assert (row["kind"], row["seq"], row["pause_quanta"]) == (f.kind.encode(), f.seq, f.pause_quanta)
        assert (row["fcs_ok"], row["ip_fragment_offset"]) == (f.fcs_ok, f.ip_fragment_offset)
        assert row["error_octets"] == len(set(f.error_at))


# -- Wireshark reads the frames --------------------------------------------------------------------

@pytest.mark.skipif(shutil.which("tshark") is None, reason="tshark not installed")
def test_tshark_reads_the_frames(tmp_path: Path) -> None:
    """The pcap holds frames WITHOUT the FCS, linktype 1 (DLT_EN10MB), as libpcap delivers
    them: Wireshark assumes no FCS on that linktype by default."""
    frames = [*udp(1400, seq=1), *udp(3000, seq=2), *udp(18, seq=3), pause_frame(A_MAC, 0xABCD),
              pfc_frame(A_MAC, 0x81, [1, 0, 0, 0, 0, 0, 0, 0x4242])]
    pcap = tmp_path / "frames.pcap"
    wrpcap(str(pcap), [Ether(f.data[:-4]) for f in frames], linktype=1)
    fields = ["frame.len", "udp.length", "eth.type", "ip.frag_offset", "udp.checksum.status",
              "ip.checksum.status", "macc.opcode", "macc.pause_time", "macc.cbfc.enbv", "macc.cbfc.pause_time.c7"]
    out = subprocess.run(
        ["tshark", "-r", str(pcap), "-o", "udp.check_checksum:TRUE", "-o", "ip.check_checksum:TRUE",
         "-T", "fields", *(a for f in fields for a in ("-e", f))],
        capture_output=True, text=True, check=True, timeout=60).stdout
    rows = [line.split("\t") for line in out.splitlines()]
    assert [r[0] for r in rows] == [str(len(f.data) - 4) for f in frames]
    # udp.length appears where the datagram is complete: the 3000-byte one on its last fragment.
    assert [r[1] for r in rows] == ["1408", "", "", "3008", "26", "", ""]
    assert [r[2] for r in rows] == ["0x0800"] * 5 + ["0x8808"] * 2
    assert [r[3] for r in rows[:5]] == [str(f.ip_fragment_offset) for f in frames[:5]]
    good = "1"  # Wireshark's checksum status: 0 bad, 1 good, 2 unverified
    assert [r[4] for r in rows] == [good, "", "", good, good, "", ""]
    assert all(r[5] == good for r in rows[:5])
    assert rows[5][6:8] == ["0x0001", "43981"]
    assert rows[6][6] == "0x0101" and rows[6][8] == "0x0081" and rows[6][9] == str(0x4242)


@settings(max_examples=300, deadline=None)
@given(prefix=st.binary(max_size=40).map(lambda b: b[:len(b) // 2 * 2]),
       payload=st.one_of(st.binary(max_size=9100), st.integers(0, 9100).map(lambda n: b"\xff" * n),
                         st.integers(0, 9100).map(bytes)))
@example(prefix=b"", payload=b"")
@example(prefix=b"", payload=b"\xff")
@example(prefix=b"\x00\x01\xf2\x03", payload=b"\xf4\xf5\xf6\xf7")  # RFC 1071 1.2's example words
def test_udp_datagram_checksum_is_scapys(prefix: bytes, payload: bytes) -> None:
    """Any payload length (odd ones padded), all-ones and all-zero data (the two zeros of ones' complement) after
    an even prefix: the checksum Scapy's checksum gives over prefix and payload (a computed 0 sent as all ones),
    between the UDP head and the payload."""
    got = _inet.udp_datagram(prefix, b"\x13\x89\x13\x89\x05\x80", payload)
    assert got[:6] == b"\x13\x89\x13\x89\x05\x80" and got[8:] == payload
    assert int.from_bytes(got[6:8], "big") == (checksum(prefix + payload) or 0xFFFF)


def test_ip_identification_wraps_at_16_bits():
    """A stream longer than 65535 packets: the 16-bit Identification wraps instead of failing."""
    big = udp_frames(payload(1400, 70_000), **FLOW, ip_id=70_000)  # type: ignore[arg-type]
    assert big == udp_frames(payload(1400, 70_000), **FLOW, ip_id=70_000 - 65536)  # type: ignore[arg-type]


def test_udp_frames_are_packed_without_importing_scapy():
    """UDP frames come from templates packed without Scapy, whose import (~0.2 s of CPU) would otherwise come
    before a simulation's first datagram; the frames are held to Scapy's own builds by the tests above."""
    import sys

    script = """
import sys
from nicrig.acquisition.sim.ethernet import udp_frames
frames = udp_frames(bytes(3000), src_mac="02:00:00:00:00:01", dst_mac="02:00:00:00:00:02", src_ip="10.0.0.1",
                    dst_ip="10.0.0.2", sport=5001, dport=5002, ip_id=7, vlan=3)
print(len(frames), sorted(m for m in sys.modules if m.split(".")[0] == "scapy"))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split(maxsplit=1) == ["3", "[]\n"]


def test_building_frames_leaves_the_routing_tables_unread_and_scapy_as_it_was():
    """The frames name every address, so Scapy's import skips reading the host's routes (conf.route_autoload,
    restored after it); they load on request (Scapy adds the loopback routes to whatever the host has)."""
    import sys

    script = """
from nicrig.acquisition.sim.ethernet import pause_frame, udp_frames
udp_frames(bytes(3000), src_mac="02:00:00:00:00:01", dst_mac="02:00:00:00:00:02", src_ip="10.0.0.1",
           dst_ip="10.0.0.2", sport=5001, dport=5002, ip_id=7)
pause_frame("02:00:00:00:00:01", 3)
from scapy.config import conf
assert conf.route.routes == [] and conf.route_autoload and conf.route6_autoload
conf.route.resync()
print(len(conf.route.routes))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) > 0


def test_gmii_copies_tx_en_onto_a_spare_channel_and_the_packer_refuses_bad_lines() -> None:
    """The rig's LINK_ACT is TX_EN's copy on channel 20 (a spare bit of the third byte), drawn in the same pass
    as the lines (_gmii_pack.c); everything else is as without it."""
    from nicrig.acquisition.sim._gmii_pack import pack

    (f,) = udp(300)
    r = GmiiRenderer([(12, replace(f, error_at=(4,)))], [(30, pause_frame(B_MAC, 2))])
    plain = r.render(0, 500)
    for channel in (20, 23):
        copied = r.render(0, 500, tx_en_copy=channel)
        bits = unpack_bits(copied, 24)
        assert np.array_equal(bits[:, channel], bits[:, CHANNELS.index("TX_EN")])
        assert bits[:, 12].any() and np.array_equal(np.delete(bits, channel, axis=1),
                                                    np.delete(unpack_bits(plain, 24), channel, axis=1))
    with pytest.raises(ValueError, match="channel 20 to 23"):
        r.render(0, 10, tx_en_copy=19)
    line = np.zeros(4, np.uint8)
    out = np.empty((4, 3), np.uint8)
    assert pack(out, None, None, None, None) is out and not out.any()
    with pytest.raises(ValueError, match="both lines or both None"):
        pack(out, line, None, None, None)
    with pytest.raises(ValueError, match="txd has 3 clocks, out 4"):
        pack(out, line[:3], line[:3], None, None)
    with pytest.raises(TypeError, match="uint8"):
        pack(out, None, None, line.astype(np.int16), line)
    with pytest.raises(ValueError, match="whole number of 3-byte samples"):
        pack(np.empty(7, np.uint8), None, None, None, None)
    for wide in (np.empty((4, 3), np.float64), np.empty(6, np.uint16)):  # bytes of 8 or 2 samples: once written
        with pytest.raises(TypeError, match="out must be uint8"):
            pack(wide, None, None, None, None)
