"""Spaced-stream throughput: rates, loss, CPU and interrupts against spacing, the knee, theoretical maxima.

Seed 002 section 3.2: for each packet size the transmit spacing is swept; the
received "user" rate follows the offered load (size / spacing, a 1/t curve)
until a bottleneck flattens it, and below some spacing packets are lost. The
*knee* here is the smallest spacing from which on nothing was lost. Seed 002
figure 9.1 tabulates the best rate of 1472-byte packets; seed 000 section 3.3
gives the rates a gigabit link allows at best (957, 1914, 214, 428, 949
Mbit/s), which :func:`theoretical_max_user_mbps` computes for any size and link.

Inputs are the ``stream/points`` table of a udpmon results file (columns as
documented in ``docs/formats.md``); everything returned is per size, with
units in the field names.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from nicrig.analysis.latency import IPV4_HEADER_BYTES, UDP_HEADER_BYTES, frames_per_message

#: Ethernet header (14) and FCS (4); preamble with SFD (8) and the inter-frame gap (12): IEEE 802.3 clause 3-4.
ETHERNET_HEADER_FCS_BYTES = 18
PREAMBLE_GAP_BYTES = 20
MIN_FRAME_BYTES = 64
TCP_HEADER_BYTES = 20


def wire_bytes_per_message(payload_bytes: int, *, l4_header_bytes: int = UDP_HEADER_BYTES,
                           mtu: int = 1500) -> int:
    """Bytes a message occupies on an Ethernet link, gaps included (seed 000 3.3: 1472-byte UDP -> 1538).

    Fragments per RFC 791 (the L4 header travels in the first); each frame is
    padded to the 64-byte minimum and pays preamble, SFD and gap.
    """
    datagram = payload_bytes + l4_header_bytes
    frames = frames_per_message(payload_bytes, mtu) if l4_header_bytes == UDP_HEADER_BYTES else 1
    per_fragment = (mtu - IPV4_HEADER_BYTES) // 8 * 8
    total = 0
    for i in range(frames):
        chunk = datagram - i * per_fragment if i == frames - 1 else per_fragment
        total += max(chunk + IPV4_HEADER_BYTES + ETHERNET_HEADER_FCS_BYTES, MIN_FRAME_BYTES) + PREAMBLE_GAP_BYTES
    return total


def theoretical_max_user_mbps(payload_bytes: int, link_rate_bps: float = 1e9, *, directions: int = 1,
                              l4_header_bytes: int = UDP_HEADER_BYTES, mtu: int = 1500) -> float:
    """The best payload rate (Mbit/s) a link allows for messages of ``payload_bytes``, over ``directions``.

    Seed 000 3.3: 1472 / 1538 x 1000 = 957 Mbit/s (UDP, large), 18 / 84 x 1000 =
    214 (UDP, minimum frames), doubled for the full-duplex 3-way tests, 1460 /
    1538 x 1000 = 949 for TCP (pass ``l4_header_bytes=20``).
    """
    return directions * link_rate_bps / 1e6 * payload_bytes / wire_bytes_per_message(
        payload_bytes, l4_header_bytes=l4_header_bytes, mtu=mtu)


def seed000_maxima(link_rate_bps: float = 1e9) -> dict[str, float]:
    """Seed 000 section 3.3's theoretical maxima for a link of ``link_rate_bps``, computed."""
    return {
        "UDP send or receive, 1472-byte datagrams": theoretical_max_user_mbps(1472, link_rate_bps),
        "UDP 3-way, 1472-byte datagrams": theoretical_max_user_mbps(1472, link_rate_bps, directions=2),
        "UDP send or receive, 18-byte datagrams": theoretical_max_user_mbps(18, link_rate_bps),
        "UDP 3-way, 18-byte datagrams": theoretical_max_user_mbps(18, link_rate_bps, directions=2),
        "TCP send or receive, 1460-byte segments": theoretical_max_user_mbps(
            1460, link_rate_bps, l4_header_bytes=TCP_HEADER_BYTES),
    }


def knee_spacing_us(spacing_us: np.ndarray, lost: np.ndarray) -> float:
    """The smallest spacing from which on no point lost packets (NaN if the widest spacing lost some)."""
    s, where = np.unique(np.asarray(spacing_us, dtype=np.float64), return_inverse=True)
    if s.size == 0:
        return float("nan")
    lossy = np.zeros(s.size, dtype=bool)
    np.logical_or.at(lossy, where, np.asarray(lost) > 0)  # a spacing measured twice lost if either run did
    if lossy[-1]:
        return float("nan")
    bad = np.flatnonzero(lossy)
    return float(s[bad[-1] + 1] if bad.size else s[0])


@dataclass(frozen=True)
class SizeCurve:
    """One packet size's points, sorted by spacing (arrays), and what they show."""

    size_bytes: int
    spacing_us: np.ndarray
    offered_mbps: np.ndarray
    user_rate_mbps: np.ndarray
    wire_rate_mbps: np.ndarray
    lost: np.ndarray
    loss_pct: np.ndarray
    receiver_cpu_idle_pct: np.ndarray
    sender_cpu_idle_pct: np.ndarray
    receiver_interrupts_per_packet: np.ndarray
    knee_spacing_us: float
    max_user_rate_mbps: float
    spacing_at_max_us: float
    theoretical_max_user_mbps: float
    frame_time_on_wire_us: float


def size_curves(points: np.ndarray, *, link_rate_bps: float | None = 1e9, mtu: int = 1500) -> list[SizeCurve]:
    """Per size, from a ``stream/points`` table: curves against spacing, the knee, the maximum.

    ``link_rate_bps`` None: no Ethernet link between the hosts (loopback), so
    no theoretical maximum or frame time (NaN). Offered load is ``size x 8 / spacing`` (infinite at spacing 0). CPU idle
    is 100 - busy (NaN when unavailable); interrupts per packet are the
    receiver's interrupts over the packets it received (NaN when unknown).
    """
    curves = []
    for size in np.unique(points["size_bytes"]):
        p = np.sort(points[points["size_bytes"] == size], order="spacing_us")
        spacing = p["spacing_us"].astype(np.float64)
        count = p["received"] + p["lost"]
        with np.errstate(divide="ignore", invalid="ignore"):
            offered = np.where(spacing > 0, int(size) * 8 / spacing, np.inf)
            loss = np.where(count > 0, 100.0 * p["lost"] / count, np.nan)
            irq = np.where((p["remote_interrupts"] >= 0) & (p["received"] > 0),
                           p["remote_interrupts"] / p["received"], np.nan)
        user = p["user_rate_mbps"].astype(np.float64)
        best = int(np.nanargmax(user)) if np.isfinite(user).any() else 0
        curves.append(SizeCurve(
            size_bytes=int(size), spacing_us=spacing, offered_mbps=offered, user_rate_mbps=user,
            wire_rate_mbps=p["wire_rate_mbps"].astype(np.float64), lost=p["lost"].astype(np.int64),
            loss_pct=loss, receiver_cpu_idle_pct=100.0 - p["remote_cpu_busy_pct"],
            sender_cpu_idle_pct=100.0 - p["local_cpu_busy_pct"], receiver_interrupts_per_packet=irq,
            knee_spacing_us=knee_spacing_us(spacing, p["lost"]),
            max_user_rate_mbps=float(user[best]) if user.size else math.nan,
            spacing_at_max_us=float(spacing[best]) if spacing.size else math.nan,
            theoretical_max_user_mbps=(theoretical_max_user_mbps(int(size), link_rate_bps, mtu=mtu)
                                       if link_rate_bps else math.nan),
            frame_time_on_wire_us=(wire_bytes_per_message(int(size), mtu=mtu) * 8 / link_rate_bps * 1e6
                                   if link_rate_bps else math.nan),
        ))
    return curves


def interpret_curve(c: SizeCurve) -> str:
    """One sentence on a size's curve: how close to the link it gets, and what limits it (seed 002 4.1.2, 4.2.2)."""
    text = f"{c.size_bytes} bytes: at best {c.max_user_rate_mbps:.0f} Mbit/s at {c.spacing_at_max_us:g} us spacing"
    if math.isfinite(c.theoretical_max_user_mbps):
        share = 100 * c.max_user_rate_mbps / c.theoretical_max_user_mbps
        text += f", {share:.0f}% of the {c.theoretical_max_user_mbps:.0f} Mbit/s the link allows"
    if math.isnan(c.knee_spacing_us):
        return text + "; packets were lost even at the widest spacing measured."
    text += f"; no loss from {c.knee_spacing_us:g} us spacing on"
    if c.knee_spacing_us <= 1.05 * c.frame_time_on_wire_us:
        return text + " (the frame's own time on the wire): the link is the limit."
    idle = c.receiver_cpu_idle_pct[c.spacing_us < c.knee_spacing_us]
    if idle.size and np.nanmin(idle) < 20:
        return text + (f", and below it the receiver's CPU was {100 - np.nanmin(idle):.0f}% busy: the receiving host "
                       "cannot keep up (seed 002 4.1.2: losses in its IP layer).")
    if math.isfinite(c.frame_time_on_wire_us):
        return text + ", wider than the wire needs: the receiving host or its bus is the limit."
    return text + "."
