"""Ethernet frames as an IEEE 802.3 MAC hands them to the PHY, and their time on the wire.

A frame here is what 802.3 clause 3.1.1 (Figure 3-1) calls the MAC frame: from the
first octet of the destination address through the last octet of the FCS. The
preamble, SFD and inter-frame gap are not part of it; the timing functions and
the GMII renderer (:mod:`nicrig.acquisition.sim.gmii`) add them.

Byte order: ``Frame.data`` lists octets in the order they are transmitted; within an
octet the least significant bit goes first (clause 3.3). The FCS octets are therefore
the little-endian bytes of the reflected CRC-32 that :func:`zlib.crc32` returns.

UDP frames come from a template packed here once per flow shape (addresses, ports, payload
length, MTU, VLAN): the 802.3 and 802.1Q headers, each fragment's IPv4 header (RFC 791) and
the UDP header (RFC 768), laid out and fragmented as Scapy builds ``Ether / Dot1Q / IP /
UDP`` and cuts it with ``fragment``. The tests build the same frames with Scapy and compare
every byte, so that the headers the decoders are checked against are Scapy's, not only
those of a packer written here. Each packet then only patches the fields that change
(payload, IP identification, the checksums, the FCS). MAC Control frames (PAUSE, PFC) are
built with Scapy, their parameters packed here from the annex layouts, which the tests
check against Scapy and Wireshark.

Scapy is imported by the functions that build MAC Control frames, not with this module:
its import costs about 0.2 s of CPU even without reading the host's routing tables (which
those functions skip), and UDP frames, which a simulation needs before its model can
start, never wait for it.
"""

from __future__ import annotations

import ipaddress
import struct
import zlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import TYPE_CHECKING

from nicrig.acquisition.sim._inet import ipv4_frame, udp_datagram

from nicrig.udpmon.payload import header_seq

if TYPE_CHECKING:
    from scapy.packet import Packet

#: Seven preamble octets and the start frame delimiter (802.3 clause 3.2.1, 3.2.2), in
#: transmission order. Sent LSB first, 0x55 is 1010... and 0xD5 ends in the SFD's "11".
PREAMBLE_SFD = b"\x55" * 7 + b"\xd5"
#: Minimum inter-packet gap, 96 bit times (802.3 clause 4.4.2), in octets.
IFG_BYTES = 12
#: Minimum frame length including the FCS (802.3 clause 4.4.2, minFrameSize 512 bits).
MIN_FRAME_BYTES = 64
FCS_BYTES = 4
#: One pause_time quantum is 512 bit times (802.3 Annex 31B.2).
PAUSE_QUANTUM_BITS = 512
#: CRC-32 of a frame with a correct FCS, as :func:`zlib.crc32` reports it (the 802.3
#: clause 3.2.9 remainder 0xC704DD7B, bit-reflected and complemented).
CRC32_RESIDUE = 0x2144DF1C

#: Reserved multicast address of MAC Control frames (802.3 Annex 31B.1).
MAC_CONTROL_DST = "01:80:c2:00:00:01"
ETHERTYPE_IPV4 = 0x0800
ETHERTYPE_VLAN = 0x8100
ETHERTYPE_MAC_CONTROL = 0x8808
OPCODE_PAUSE = 0x0001
OPCODE_PFC = 0x0101

IPV4_HEADER_BYTES = 20
UDP_HEADER_BYTES = 8
#: Smallest MTU every IPv4 link must carry (RFC 791).
IPV4_MIN_MTU = 68
KINDS = ("udp", "pause", "pfc", "other")

#: Destination and source addresses and the Length/Type field (802.3 clause 3.1.1).
MAC_HEADER_BYTES = 14
#: An 802.1Q tag between the source address and the Length/Type field.
VLAN_TAG_BYTES = 4
_PAUSE_PARAMS = struct.Struct("!HH")
_PFC_PARAMS = struct.Struct("!HH8H")
_U16 = struct.Struct("!H")
#: An IPv4 header without its addresses (RFC 791): version and IHL, TOS, Total Length, Identification, flags
#: and Fragment Offset, TTL, Protocol, Header Checksum.
_IPV4_HEADER = struct.Struct("!BBHHHBBH")
#: Version 4, a header of five 32-bit words (no options).
_IPV4_VERSION_IHL = 0x45
#: The Time to Live Scapy (and Linux's default net.ipv4.ip_default_ttl) gives a datagram.
_IPV4_TTL = 64
_IPPROTO_UDP = 17
#: The More Fragments flag in the flags and Fragment Offset word (RFC 791).
_IP_MORE_FRAGMENTS = 0x2000
#: A UDP header's source port, destination port and Length (RFC 768); its checksum follows.
_UDP_PORTS_LENGTH = struct.Struct("!HHH")
#: The Type field of IPv4 and of an 802.1Q tag, as the frame's bytes hold it.
_IPV4_TYPE, _VLAN_TYPE = _U16.pack(ETHERTYPE_IPV4), _U16.pack(ETHERTYPE_VLAN)
#: UDP templates kept; one per flow shape, so a few per simulated host pair and size.
_UDP_TEMPLATES = 1024


# -- time on the wire -------------------------------------------------------------------------

def frame_time_on_wire_ns(frame_len_bytes: int, rate_bps: float = 1e9) -> float:
    """Time in ns from the first preamble bit to the last FCS bit of a frame of
    ``frame_len_bytes`` (destination address .. FCS) at ``rate_bps`` (802.3 clause 3.2)."""
    return (len(PREAMBLE_SFD) + frame_len_bytes) * 8 * 1e9 / rate_bps


def wire_time_ns(frame_len_bytes: int, rate_bps: float = 1e9) -> float:
    """Time in ns a frame of ``frame_len_bytes`` (destination .. FCS) holds the link at
    ``rate_bps``: preamble + SFD (8 B), the frame, then the minimum IFG (12 B, clause 4.4.2).
    Back-to-back frames start one ``wire_time_ns`` apart."""
    return (len(PREAMBLE_SFD) + frame_len_bytes + IFG_BYTES) * 8 * 1e9 / rate_bps


def pause_time_ns(quanta: int, rate_bps: float = 1e9) -> float:
    """Time in ns that ``quanta`` pause quanta (512 bit times each, Annex 31B.2) last at ``rate_bps``."""
    return quanta * PAUSE_QUANTUM_BITS * 1e9 / rate_bps


# -- FCS --------------------------------------------------------------------------------------

def fcs(frame_without_fcs: bytes) -> bytes:
    """The 4 FCS octets (802.3 clause 3.2.9) of destination .. end of pad, in transmission order.

    zlib's CRC-32 is the clause 3.2.9 CRC computed on LSB-first octets, with the
    complemented first 32 bits and complemented remainder; its little-endian bytes put
    the x^31 coefficient first on the wire, as the clause requires.
    """
    return zlib.crc32(frame_without_fcs).to_bytes(FCS_BYTES, "little")


def fcs_ok(frame: bytes) -> bool:
    """True when ``frame`` (destination .. FCS) carries the right FCS: its CRC leaves the residue."""
    return zlib.crc32(frame) == CRC32_RESIDUE


# -- the frame record ---------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Frame:
    """A MAC frame, the unit the rig model schedules and the GMII renderer draws.

    ``data`` runs from the destination address through the FCS. ``kind`` is one of
    :data:`KINDS`; ``seq`` the nicrig header's sequence number (-1 if none);
    ``pause_quanta`` the pause_time of a PAUSE frame (-1 otherwise, PFC included: its eight
    times are in ``data``). ``error_at`` lists offsets into ``data`` of octets during which
    the PHY interface asserts TX_ER / RX_ER (802.3 clause 35.2.2.5, 35.2.2.8).

    At least 18 bytes (a header and an FCS); shorter than 64 is allowed, as a runt for
    decoder tests.
    """

    data: bytes
    kind: str = "other"
    seq: int = -1
    pause_quanta: int = -1
    error_at: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if len(self.data) < MAC_HEADER_BYTES + FCS_BYTES:
            raise ValueError(f"frame of {len(self.data)} bytes: needs at least a 14-byte header and the FCS")
        if self.kind not in KINDS:
            raise ValueError(f"frame kind {self.kind!r}: not one of {KINDS}")
        if self.error_at and any(not 0 <= i < len(self.data) for i in self.error_at):
            raise ValueError(f"error_at {self.error_at}: offsets must lie in the frame's {len(self.data)} bytes")

    @property
    def dst(self) -> str:
        """Destination address, ``aa:bb:cc:dd:ee:ff``."""
        return self.data[0:6].hex(":")

    @property
    def src(self) -> str:
        """Source address, ``aa:bb:cc:dd:ee:ff``."""
        return self.data[6:12].hex(":")

    @property
    def ethertype(self) -> int:
        """The outer Length/Type field; 0x8100 when an 802.1Q tag follows the source address."""
        return int.from_bytes(self.data[12:14], "big")

    @property
    def vlan_id(self) -> int:
        """The 802.1Q VLAN identifier (12 bits of the TCI), or -1 for an untagged frame."""
        if self.ethertype != ETHERTYPE_VLAN:
            return -1
        return int.from_bytes(self.data[14:16], "big") & 0x0FFF

    @property
    def inner_ethertype(self) -> int:
        """The Type of the MAC client data: after the VLAN tag if any, else :attr:`ethertype`."""
        if self.ethertype != ETHERTYPE_VLAN:
            return self.ethertype
        return int.from_bytes(self.data[16:18], "big")

    @property
    def fcs_ok(self) -> bool:
        """True when the FCS matches the rest of the frame."""
        return fcs_ok(self.data)

    @property
    def _ipv4_at(self) -> int:
        """Where the IPv4 header starts in :attr:`data`, or -1 if the frame does not carry a whole one."""
        # The Type fields compared as bytes: the model asks this of each frame it receives, three times.
        data, ip = self.data, MAC_HEADER_BYTES
        type_ = data[12:14]
        if type_ == _VLAN_TYPE:
            ip += VLAN_TAG_BYTES
            type_ = data[16:18]
        if type_ != _IPV4_TYPE or len(data) < ip + IPV4_HEADER_BYTES:
            return -1
        return ip

    @property
    def ip_fragment_offset(self) -> int:
        """The IPv4 Fragment Offset field, in units of 8 bytes (RFC 791) as Scapy's ``IP.frag``
        and Wireshark's ``ip.frag_offset`` show it; -1 if the frame does not carry IPv4."""
        ip = self._ipv4_at
        return -1 if ip < 0 else int.from_bytes(self.data[ip + 6:ip + 8], "big") & 0x1FFF

    @property
    def ip_more_fragments(self) -> bool:
        """The IPv4 More Fragments flag (RFC 791); False if the frame does not carry IPv4."""
        ip = self._ipv4_at
        return ip >= 0 and bool(self.data[ip + 6] & 0x20)


#: Frame's fields' setters (its slots' descriptors), for :func:`_udp_frame_record`.
_SET_DATA, _SET_KIND, _SET_SEQ, _SET_PAUSE_QUANTA, _SET_ERROR_AT = (
    Frame.__dict__[name].__set__ for name in ("data", "kind", "seq", "pause_quanta", "error_at"))


def _udp_frame_record(data: bytes, seq: int) -> Frame:
    """``Frame(data, kind="udp", seq=seq)`` for a frame :func:`udp_frames` has just made, which needs none of
    ``__post_init__``'s checks (at least 64 bytes, a known kind, no errors): a frozen dataclass's ``__init__``
    sets each field through ``object.__setattr__`` and then checks, ~12,000 instructions a simulated message;
    its slots set directly, a third of that."""
    frame = object.__new__(Frame)
    _SET_DATA(frame, data)
    _SET_KIND(frame, "udp")
    _SET_SEQ(frame, seq)
    _SET_PAUSE_QUANTA(frame, -1)
    _SET_ERROR_AT(frame, ())
    return frame


def _stack(*layers: Packet) -> Packet:
    """``layers[0] / layers[1] / ...`` without the copies Scapy's ``/`` makes of each
    operand (they cost about 40% of building a frame); the layers must be freshly made."""
    for upper in layers[1:]:
        layers[0].add_payload(upper)
    return layers[0]


def _finish(packet: Packet | bytes, kind: str, seq: int = -1, pause_quanta: int = -1) -> Frame:
    """Pad to 60 bytes (64 with the FCS: clause 3.2.8 Pad field) and append the FCS."""
    body = bytes(packet).ljust(MIN_FRAME_BYTES - FCS_BYTES, b"\x00")
    return Frame(body + fcs(body), kind=kind, seq=seq, pause_quanta=pause_quanta)


def corrupt_fcs(frame: Frame) -> Frame:
    """``frame`` with every FCS bit inverted, hence a wrong FCS; other fields kept."""
    bad = bytes(b ^ 0xFF for b in frame.data[-FCS_BYTES:])
    return replace(frame, data=frame.data[:-FCS_BYTES] + bad)


# -- frame builders -----------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class _UdpFragment:
    """One frame of a UDP template: ``head`` is the link header and the IPv4 header, with
    Identification and Header Checksum zero (the IPv4 header starts at ``ip_at``); the frame
    carries bytes ``start:end`` of the UDP datagram after it."""

    head: bytes
    ip_at: int
    start: int
    end: int


@contextmanager
def _scapy_without_routes() -> Iterator[None]:
    """Scapy's layers, imported without reading the host's IPv4 and IPv6 routing tables (over netlink, about a
    third of the import): the frames built here name every address, so no route is ever looked up. The switch
    is Scapy's own ``conf.route_autoload`` (for hosts with large tables), as it was after the import; should
    anything in this process need the routes, ``conf.route.resync()`` reads them."""
    from scapy.config import conf

    saved = conf.route_autoload, conf.route6_autoload
    conf.route_autoload = conf.route6_autoload = False
    try:
        yield
    finally:
        conf.route_autoload, conf.route6_autoload = saved


@dataclass(frozen=True, slots=True)
class _UdpTemplate:
    """The per-packet-invariant part of a flow shape's frames. ``udp_head`` is the UDP
    source port, destination port and length; ``sum_prefix`` the RFC 768 pseudo-header then
    ``udp_head`` and a zero checksum: the UDP checksum is that of ``sum_prefix + payload``."""

    udp_head: bytes
    sum_prefix: bytes
    fragments: tuple[_UdpFragment, ...]


def _mac(address: str) -> bytes:
    """The six octets of a MAC address written ``aa:bb:cc:dd:ee:ff``, in transmission order."""
    octets = address.split(":")
    if len(octets) != 6 or not all(len(o) == 2 for o in octets):
        raise ValueError(f"MAC address {address!r}: six two-digit hex octets separated by ':'")
    return bytes.fromhex("".join(octets))


def _fragment_spans(datagram_len: int, mtu: int) -> list[tuple[int, int]]:
    """Byte ranges ``[start, end)`` of a UDP datagram that its IPv4 fragments carry, cut as Scapy's
    ``fragment(packet, fragsize=mtu - 20)`` cuts them: every fragment but the last carries the largest multiple
    of 8 bytes (RFC 791 offsets count 8-byte units) that fits the MTU, and the last whatever is left, up to the
    full ``mtu - 20`` bytes. One span when the datagram fits."""
    room = mtu - IPV4_HEADER_BYTES
    if datagram_len <= room:
        return [(0, datagram_len)]
    step = room - room % 8
    whole = -(-(datagram_len - room) // step)  # fragments of ``step`` bytes before the last
    return [(k * step, (k + 1) * step) for k in range(whole)] + [(whole * step, datagram_len)]


@lru_cache(maxsize=_UDP_TEMPLATES)
def _udp_template(src_mac: str, dst_mac: str, src_ip: str, dst_ip: str, sport: int, dport: int,
                  payload_len: int, mtu: int, vlan: int | None) -> _UdpTemplate:
    """The frames' layout for a payload of ``payload_len`` bytes: the 802.3 header (an 802.1Q tag with
    priority 0 when ``vlan`` is given), the IPv4 header of each fragment (RFC 791: version 4, a 20-byte header,
    TOS 0, TTL 64, protocol 17, More Fragments on all but the last, offsets in 8-byte units), the UDP header
    (RFC 768). Every byte is the one Scapy writes for ``Ether / [Dot1Q /] IP / UDP / Raw`` cut by its
    ``fragment``; tests/test_ethernet_gmii.py checks them against Scapy's frames, built directly."""
    datagram_len = UDP_HEADER_BYTES + payload_len
    link = _mac(dst_mac) + _mac(src_mac)
    if vlan is not None:
        link += _VLAN_TYPE + _U16.pack(vlan)
    link += _IPV4_TYPE
    addresses = ipaddress.IPv4Address(src_ip).packed + ipaddress.IPv4Address(dst_ip).packed
    spans = _fragment_spans(datagram_len, mtu)
    fragments = []
    for k, (start, end) in enumerate(spans):
        flags_offset = (_IP_MORE_FRAGMENTS if k < len(spans) - 1 else 0) | start // 8
        ip = _IPV4_HEADER.pack(_IPV4_VERSION_IHL, 0, IPV4_HEADER_BYTES + end - start, 0, flags_offset, _IPV4_TTL,
                               _IPPROTO_UDP, 0) + addresses
        fragments.append(_UdpFragment(link + ip, len(link), start, end))
    udp_head = _UDP_PORTS_LENGTH.pack(sport, dport, datagram_len)
    return _UdpTemplate(udp_head, addresses + b"\x00" + bytes([_IPPROTO_UDP]) + udp_head[4:6] + udp_head + b"\x00\x00",
                        tuple(fragments))


def _udp_frame(fragment_: _UdpFragment, datagram: bytes, ip_id: int) -> bytes:
    """The bytes of ``fragment_``'s frame of ``datagram`` (its link and IPv4 headers with Identification ``ip_id``,
    modulo 2**16: the field is 16 bits and wraps, RFC 6864, and the Header Checksum, RFC 791; its part of the
    datagram; the pad and the FCS as :func:`_finish` adds them), put together in one C call (``_inet.c``)."""
    return ipv4_frame(fragment_.head, fragment_.ip_at, ip_id & 0xFFFF, datagram, fragment_.start, fragment_.end)


def _udp_datagram(template: _UdpTemplate, payload: bytes) -> bytes:
    """UDP header and ``payload``; the checksum (RFC 768) covers the pseudo-header and the
    whole datagram, and a computed 0 is sent as 0xFFFF (0 would mean "no checksum"). One C call
    (``_inet.c``): the payload summed where it lies and copied once."""
    return udp_datagram(template.sum_prefix, template.udp_head, payload)


def udp_frames(payload: bytes, *, src_mac: str, dst_mac: str, src_ip: str, dst_ip: str,
               sport: int, dport: int, ip_id: int, mtu: int = 1500, vlan: int | None = None) -> list[Frame]:
    """Ethernet (optionally 802.1Q-tagged) / IPv4 / UDP frames carrying ``payload``.

    The UDP checksum covers the whole datagram. When the IP packet (payload + 28 bytes)
    exceeds ``mtu`` (bytes, IP header included) it is split into IPv4 fragments of at most
    ``mtu`` bytes each, offsets a multiple of 8 (RFC 791); the first one carries the UDP
    header and so the nicrig header. Every fragment's Frame gets the header's ``seq`` (for
    bookkeeping), and ``kind`` "udp". Frames are padded to 64 bytes with the FCS.

    The layout is Scapy's: a template packed once per flow shape (addresses, ports, payload
    length, ``mtu``, ``vlan``; a bounded LRU cache keeps them) gives the headers and the
    fragmentation, and each call patches in the payload, the IP identification, every
    fragment's IP header checksum, the UDP checksum and the FCS. The frames are byte for byte
    those Scapy builds directly (the tests check it).
    """
    if mtu < IPV4_MIN_MTU:
        raise ValueError(f"mtu {mtu} bytes: IPv4 needs at least {IPV4_MIN_MTU}")
    if len(payload) > 0xFFFF - IPV4_HEADER_BYTES - UDP_HEADER_BYTES:
        raise ValueError(f"UDP payload of {len(payload)} bytes does not fit an IPv4 datagram")
    if vlan is not None and not 0 <= vlan <= 0xFFF:
        raise ValueError(f"vlan {vlan}: a VLAN ID has 12 bits")
    template = _udp_template(src_mac, dst_mac, src_ip, dst_ip, sport, dport, len(payload), mtu, vlan)
    datagram = _udp_datagram(template, payload)
    seq = header_seq(payload)
    return [_udp_frame_record(_udp_frame(f, datagram, ip_id), seq) for f in template.fragments]


@lru_cache(maxsize=64)
def pause_frame(src_mac: str, quanta: int) -> Frame:
    """An 802.3 Annex 31B PAUSE frame asking the peer to stop for ``quanta`` x 512 bit times.

    Memoized (a Frame is immutable): a simulated receiver sends the same two (PAUSE and XON) again and
    again, and Scapy takes ~0.3 ms to build one.

    Layout: dst 01-80-C2-00-00-01, src, Type 0x8808, opcode 0x0001, pause_time (2 bytes,
    big-endian), 42 zero bytes of reserved field, FCS: 64 bytes.
    """
    if not 0 <= quanta <= 0xFFFF:
        raise ValueError(f"pause quanta {quanta}: pause_time is a 16-bit field")
    with _scapy_without_routes():
        from scapy.layers.l2 import Ether
        from scapy.packet import Raw

    header = Ether(dst=MAC_CONTROL_DST, src=src_mac, type=ETHERTYPE_MAC_CONTROL)
    return _finish(_stack(header, Raw(_PAUSE_PARAMS.pack(OPCODE_PAUSE, quanta))), "pause", pause_quanta=quanta)


def pfc_frame(src_mac: str, class_enable: int, quanta8: Sequence[int]) -> Frame:
    """A priority-based flow control frame (IEEE 802.1Qbb; format in 802.3 Annex 31D).

    Layout: dst 01-80-C2-00-00-01, src, Type 0x8808, opcode 0x0101, priority_enable_vector
    (2 bytes; bit n of ``class_enable`` enables priority n, the upper octet is reserved 0),
    time[0]..time[7] (2 bytes each, quanta of 512 bit times), 26 zero bytes, FCS: 64 bytes.
    """
    if not 0 <= class_enable <= 0xFF:
        raise ValueError(f"class_enable {class_enable:#x}: one bit for each of 8 priorities")
    if len(quanta8) != 8 or any(not 0 <= q <= 0xFFFF for q in quanta8):
        raise ValueError(f"quanta8 {quanta8}: needs eight 16-bit pause times")
    with _scapy_without_routes():
        from scapy.layers.l2 import Ether
        from scapy.packet import Raw

    header = Ether(dst=MAC_CONTROL_DST, src=src_mac, type=ETHERTYPE_MAC_CONTROL)
    return _finish(_stack(header, Raw(_PFC_PARAMS.pack(OPCODE_PFC, class_enable, *quanta8))), "pfc")
