"""GMII lanes for the decoder tests: frames built with Scapy, drawn clock by clock (IEEE 802.3 clause 35).

EN is high from the first of seven 0x55 preamble octets through the last FCS
octet, D<0> is the LSB, the FCS is zlib's CRC-32 (clause 3.2.9, little-endian
on the wire). The lanes here are the captures the gmii/ethernet decoder tests
(``test_decoder_ethernet.py``) check against Scapy and sigrok-cli, and the
kernel conformance tests (``test_kernel_link.py``) decode with both the PD and
the kernel.
"""

from __future__ import annotations

import random
import zlib

import numpy as np
from nicrig.udpmon.payload import HEADER, MAGIC
from scapy.contrib.mac_control import MACControlClassBasedFlowControl, MACControlPause
from scapy.layers.inet import IP, UDP, fragment
from scapy.layers.l2 import ARP, LLC, Dot1AD, Dot1Q, Dot3, Ether
from scapy.packet import Raw

STATE_RATE = 125e6  # one sample per 125 MHz GTX_CLK cycle
CHANNELS = ["TX_EN", "TX_ER", *(f"TXD[{i}]" for i in range(8))]
CLK_CHANNELS = [*CHANNELS, "GTX_CLK"]
PIN_MAP = {"en": "TX_EN", "er": "TX_ER", **{f"d{i}": f"TXD[{i}]" for i in range(8)}}
PREAMBLE_SFD = b"\x55" * 7 + b"\xd5"
A_MAC, B_MAC = "02:00:00:00:00:0a", "02:00:00:00:00:0b"
PAUSE_DST = "01:80:c2:00:00:01"


def with_fcs(body: bytes) -> bytes:
    return body + zlib.crc32(body).to_bytes(4, "little")


def padded(pkt) -> bytes:
    """The frame without FCS, padded to the 60-octet minimum (clause 3.2.8)."""
    return bytes(pkt).ljust(60, b"\x00")


class Lane:
    """One GMII direction, clock by clock: EN, ER and the data octet."""

    def __init__(self) -> None:
        self.en: list[int] = []
        self.er: list[int] = []
        self.d: list[int] = []
        self.frames: list[tuple[int, int, bytes, tuple[int, ...]]] = []  # (ss, es, data, er_at)

    def idle(self, clocks: int, code: int = 0, er: int = 0) -> Lane:
        self.en += [0] * clocks
        self.er += [er] * clocks
        self.d += [code] * clocks
        return self

    def burst(self, octets: bytes, er_at: tuple[int, ...] = ()) -> tuple[int, int]:
        ss = len(self.en)
        self.en += [1] * len(octets)
        self.er += [1 if i in er_at else 0 for i in range(len(octets))]
        self.d += list(octets)
        return ss, len(self.en)

    def frame(self, data: bytes, er_at: tuple[int, ...] = (), ifg: int = 12) -> Lane:
        """Preamble + SFD + ``data`` (destination .. FCS), ER on data octets ``er_at``, then ``ifg`` idle clocks."""
        ss, es = self.burst(PREAMBLE_SFD + data, tuple(i + 8 for i in er_at))
        self.frames.append((ss, es, data, er_at))
        return self.idle(ifg)

    def state_bits(self) -> np.ndarray:
        d = np.array(self.d, dtype=np.uint8)
        bits = np.zeros((len(d), 10), dtype=np.uint8)
        bits[:, 0] = self.en
        bits[:, 1] = self.er
        for i in range(8):
            bits[:, 2 + i] = (d >> i) & 1
        return bits

    def timing_bits(self) -> np.ndarray:
        """Two samples per clock with GTX_CLK: low then high; the lines change on the falling edge."""
        state = np.repeat(self.state_bits(), 2, axis=0)
        clk = np.tile(np.array([0, 1], dtype=np.uint8), len(self.en))
        return np.column_stack([state, clk])


def nicrig_udp(kind: int, seq: int, size: int = 100, vlan: list[tuple[type, int]] | None = None,
               src: str = A_MAC, dst: str = B_MAC) -> bytes:
    body = HEADER.pack(MAGIC, kind, 0, seq, 4242) + bytes(range(256)) * (size // 256 + 1)
    pkt = Ether(src=src, dst=dst)
    for layer, vid in vlan or []:
        pkt = pkt / layer(vlan=vid, prio=5)
    pkt = pkt / IP(src="10.0.0.1", dst="10.0.0.2", id=seq) / UDP(sport=40000, dport=5001) / Raw(body[:size])
    return with_fcs(padded(pkt))


def pause(quanta: int) -> bytes:
    return with_fcs(padded(Ether(src=A_MAC, dst=PAUSE_DST) / MACControlPause(pause_time=quanta)))


def pfc(enable: int, times: list[int]) -> bytes:
    fields = {f"c{i}_enabled": (enable >> i) & 1 for i in range(8)}
    fields.update({f"c{i}_pause_time": t for i, t in enumerate(times)})
    return with_fcs(padded(Ether(src=A_MAC, dst=PAUSE_DST) / MACControlClassBasedFlowControl(**fields)))


def mixed_lane() -> Lane:
    """Every frame kind the decoders know, mostly back to back with the minimum 12-clock IFG."""
    lane = Lane().idle(20)
    lane.frame(nicrig_udp(1, 1, size=100))
    lane.frame(nicrig_udp(2, 2, size=18))  # exactly 64 octets
    lane.frame(pause(0x1234))
    lane.frame(pause(0), ifg=40)
    lane.frame(pfc(0b1000_1001, [0, 1, 2, 0x100, 4, 5, 6, 0xFFFF]))
    lane.frame(nicrig_udp(3, 3, size=200, vlan=[(Dot1Q, 42)]))
    lane.frame(nicrig_udp(1, 4, size=50, vlan=[(Dot1AD, 100), (Dot1Q, 42)]))
    big = IP(src="10.0.0.1", dst="10.0.0.2", id=77) / UDP(sport=40000, dport=5001) / Raw(
        HEADER.pack(MAGIC, 1, 0, 77, 4242) + bytes(2984))
    for frag in fragment(big, fragsize=1480):
        lane.frame(with_fcs(padded(Ether(src=A_MAC, dst=B_MAC) / frag)))
    lane.frame(with_fcs(padded(Ether(src=A_MAC, dst=B_MAC) / IP(src="10.0.0.3", dst="10.0.0.4")
                               / UDP(sport=7, dport=9) / Raw(b"no nicrig header here"))))
    good = nicrig_udp(1, 5, size=300)
    lane.frame(good[:-4] + bytes([good[-4] ^ 0x01]) + good[-3:])  # bad FCS
    lane.frame(nicrig_udp(1, 6, size=300), er_at=(20, 21))  # TX_ER on two octets
    lane.frame(with_fcs(padded(Ether(src=A_MAC, dst="ff:ff:ff:ff:ff:ff") / ARP(psrc="10.0.0.1",
                                                                                pdst="10.0.0.2"))))
    lane.frame(with_fcs(padded(Dot3(src=A_MAC, dst="01:80:c2:00:00:00") / LLC(dsap=0x42, ssap=0x42, ctrl=3)
                               / Raw(bytes(35)))), ifg=30)
    return lane


def error_symbols_lane() -> Lane:
    """RX side: false carrier, carrier extend (+ error), LPI; missing SFD, junk, runt, short IFG, no preamble."""
    lane = Lane().idle(10)
    lane.idle(3, code=0x0E, er=1).idle(5)              # false carrier
    lane.frame(nicrig_udp(1, 1), ifg=0)
    lane.idle(4, code=0x0F, er=1).idle(1, code=0x1F, er=1).idle(10)  # carrier extension + error
    lane.idle(6, code=0x01, er=1).idle(6)                # LPI
    lane.burst(b"\x55" * 7 + b"\x12\x34")                 # carrier without SFD
    lane.idle(12)
    lane.burst(b"\x55\x55\x99" + PREAMBLE_SFD + with_fcs(bytes(40)))  # junk, runt
    lane.idle(4)                                          # IFG below 8 clocks
    lane.frame(pause(7), ifg=20)
    lane.burst(b"\xd5" + pause(8))                        # no preamble at all (RX may shrink it)
    lane.idle(12)
    return lane


def short_preamble_lane() -> Lane:
    """One PAUSE frame after a 3-octet preamble (TX wants 7)."""
    lane = Lane().idle(5)
    lane.burst(b"\x55" * 3 + b"\xd5" + pause(1))
    lane.idle(12)
    return lane


def truncated_lane() -> Lane:
    """Two whole frames, then a third the capture stops 100 octets into."""
    lane = Lane().idle(8)
    lane.frame(nicrig_udp(1, 1))
    lane.frame(pause(3))
    lane.burst(PREAMBLE_SFD + nicrig_udp(1, 2, size=400)[:100])
    return lane


def timing_lane() -> Lane:
    """UDP, PFC and a VLAN-tagged response, for a timing capture with GTX_CLK (:meth:`Lane.timing_bits`)."""
    lane = Lane().idle(7)
    lane.frame(nicrig_udp(1, 11))
    lane.frame(pfc(0x03, [9, 8, 0, 0, 0, 0, 0, 0]), ifg=25)
    lane.frame(nicrig_udp(3, 12, size=600, vlan=[(Dot1Q, 7)]))
    return lane


def garbage_lane(seed: int = 7, frames: int = 120) -> Lane:
    """Mutated headers (wrong lengths, IHL, truncated IPv4/UDP/MAC Control) with a correct FCS."""
    rnd = random.Random(seed)
    seeds = [nicrig_udp(1, 1), pause(5), pfc(0xFF, [1] * 8), nicrig_udp(2, 2, vlan=[(Dot1Q, 3)])]
    lane = Lane().idle(4)
    for _ in range(frames):
        body = bytearray(rnd.choice(seeds)[:-4])
        for _ in range(rnd.randint(1, 6)):
            body[rnd.randrange(len(body))] = rnd.randrange(256)
        body = bytes(body[:rnd.randint(0, len(body))])
        lane.burst(PREAMBLE_SFD + with_fcs(body))
        lane.idle(rnd.choice([1, 12, 13]))
    return lane


def random_bits(rng: np.random.Generator, p_en: float, n: int) -> np.ndarray:
    """``n`` samples of :data:`CLK_CHANNELS` at random, EN high with probability ``p_en``."""
    bits = (rng.random((n, 11)) < 0.5).astype(np.uint8)
    bits[:, 0] = rng.random(n) < p_en
    return bits
