"""Spaced-stream throughput: rates, loss, CPU and interrupts against spacing, the knee, theoretical maxima.

Hughes-Jones et al. 2003, §3.2: for each packet size the transmit spacing is swept; the
received "user" rate follows the offered load (size / spacing, a 1/t curve)
until a bottleneck flattens it, and below some spacing packets are lost. The
*knee* here is the smallest spacing from which on nothing was lost. Hughes-Jones et al. 2003
figure 9.1 tabulates the best rate of 1472-byte packets; Pai, Rixner and Kim 2004, §3.3
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

from nicrig.analysis.citations import HUGHES_JONES
from nicrig.analysis.quantity import expanded, number, rectangular, setting
from nicrig.analysis.sentence import Quotes, Sentence

#: Ethernet header (14) and FCS (4); preamble with SFD (8) and the inter-frame gap (12): IEEE 802.3 clause 3-4.
ETHERNET_HEADER_FCS_BYTES = 18
PREAMBLE_GAP_BYTES = 20
MIN_FRAME_BYTES = 64
TCP_HEADER_BYTES = 20
IPV4_HEADER_BYTES = 20
UDP_HEADER_BYTES = 8


def frames_per_message(payload_bytes: int, mtu: int = 1500) -> int:
    """Ethernet frames an IPv4/UDP message of ``payload_bytes`` needs at ``mtu`` (RFC 791 fragmentation).

    The datagram (payload and the 8-byte UDP header) goes whole when its IP
    packet fits the MTU; otherwise each fragment carries at most ``mtu - 20``
    bytes of it, rounded down to a multiple of 8.
    """
    datagram = payload_bytes + UDP_HEADER_BYTES
    if datagram + IPV4_HEADER_BYTES <= mtu:
        return 1
    return math.ceil(datagram / ((mtu - IPV4_HEADER_BYTES) // 8 * 8))


def wire_bytes_per_message(payload_bytes: int, *, l4_header_bytes: int = UDP_HEADER_BYTES,
                           mtu: int = 1500) -> int:
    """Bytes a message occupies on an Ethernet link, gaps included (Pai, Rixner and Kim 2004, §3.3: 1472-byte UDP
    -> 1538).

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

    Pai, Rixner and Kim 2004, §3.3: 1472 / 1538 x 1000 = 957 Mbit/s (UDP, large), 18 / 84 x 1000 =
    214 (UDP, minimum frames), doubled for the full-duplex 3-way tests, 1460 /
    1538 x 1000 = 949 for TCP (pass ``l4_header_bytes=20``).
    """
    return directions * link_rate_bps / 1e6 * payload_bytes / wire_bytes_per_message(
        payload_bytes, l4_header_bytes=l4_header_bytes, mtu=mtu)


def pai_rixner_kim_2004_maxima(link_rate_bps: float = 1e9) -> dict[str, float]:
    """Pai, Rixner and Kim 2004, §3.3's theoretical maxima for a link of ``link_rate_bps``, computed."""
    return {
        "UDP send or receive, 1472-byte datagrams": theoretical_max_user_mbps(1472, link_rate_bps),
        "UDP 3-way, 1472-byte datagrams": theoretical_max_user_mbps(1472, link_rate_bps, directions=2),
        "UDP send or receive, 18-byte datagrams": theoretical_max_user_mbps(18, link_rate_bps),
        "UDP 3-way, 18-byte datagrams": theoretical_max_user_mbps(18, link_rate_bps, directions=2),
        "TCP send or receive, 1460-byte segments": theoretical_max_user_mbps(
            1460, link_rate_bps, l4_header_bytes=TCP_HEADER_BYTES),
    }


@dataclass(frozen=True)
class ReceiveRate:
    """The rate at which a stream's datagrams reached the receiving host, with its 95% half-width.

    ``packets``: the datagrams the rate spans (:func:`receive_rate`);
    ``duration_ns``: from the first of them to the last; ``user_rate_mbps``:
    payload bits of ``packets - 1`` datagrams over that time (the first opens
    the interval); ``wire_limited``: arrivals were held to the link's frame
    time (a link rate was known); ``resolution_u_mbps``: the standard
    uncertainty the time stamps' resolution gives the rate (Type B, part of
    the half-width). NaN with fewer than two datagrams.
    """

    packets: int
    duration_ns: float
    user_rate_mbps: float
    user_rate_ci95_mbps: float
    wire_limited: bool
    resolution_u_mbps: float = math.nan


#: The report's tables of a stream run, which :func:`interpret_curve` quotes: titles and columns.
BEST_TABLE = f"Best throughput per size (as {HUGHES_JONES}, figure 9.1)"
POINTS_TABLE = "Every size and spacing"
BEST_COLUMNS = ["size (bytes)", "best user rate (Mbit/s)", "best ± 95% (Mbit/s)", "at spacing (us)",
                "no loss from (us)", "link allows (Mbit/s)", "share of link (%)", "share ± 95% (%)",
                "frame on wire (us)"]
POINT_COLUMNS = ["size (bytes)", "spacing (us)", "rounds", "user (Mbit/s)", "user ± 95% (Mbit/s)", "wire (Mbit/s)",
                 "sent", "lost", "lost (%)", "receiver CPU idle (%)", "receiver interrupts per packet"]
BEST_RATE, BEST_RATE_U, LINK_ALLOWS, SHARE, SHARE_U, FRAME_ON_WIRE = (
    BEST_COLUMNS[1], BEST_COLUMNS[2], BEST_COLUMNS[5], BEST_COLUMNS[6], BEST_COLUMNS[7], BEST_COLUMNS[8])
POINT_RATE, POINT_RATE_U, CPU_IDLE = POINT_COLUMNS[3], POINT_COLUMNS[4], POINT_COLUMNS[9]
#: The column of a recomputed ``stream/points`` table holding the rate's Type B standard uncertainty (Mbit/s).
RESOLUTION_COLUMN = "user_rate_resolution_u_mbps"
#: Contiguous blocks a stream is cut into for the uncertainty of its duration, at most; each of 10 packets or more.
RATE_BLOCKS = 20


def wire_arrivals(t_ns: np.ndarray, frame_time_ns: float) -> np.ndarray:
    """The latest arrival times consistent with receive timestamps ``t_ns`` (in arrival order) and a link that
    needs ``frame_time_ns`` per message: a_k <= t_k (a timestamp is taken after its frame arrived) and
    a_k+1 - a_k >= frame_time_ns (frames follow each other on the wire).

    Interrupt coalescence timestamps a burst of frames at once, long after the
    first of them arrived; spreading each burst back at the wire's own pace
    undoes that, so no rate computed from these arrivals exceeds the link's:
    a_k = min over j >= k of (t_j - (j - k) x frame time).
    """
    k = np.arange(t_ns.size, dtype=np.float64)
    shifted = np.asarray(t_ns, dtype=np.float64) - k * frame_time_ns
    return np.minimum.accumulate(shifted[::-1])[::-1] + k * frame_time_ns


def receive_rate(kernel_ns: np.ndarray, seq: np.ndarray, payload_bytes: int, *, link_rate_bps: float | None = None,
                 mtu: int = 1500, step_ns: float = 1.0) -> ReceiveRate:
    """Payload rate of a received stream from its receive timestamps (ns, arrival order; <= 0: none) and sequence
    numbers (duplicates are ignored), never above the link's rate for messages of ``payload_bytes``.

    With ``link_rate_bps``, timestamps closer together than half the
    message's wire time (:func:`wire_bytes_per_message`) cannot be separate
    arrivals: they are one *batch* a coalesced interrupt delivered. The last
    datagram of a batch arrived just before the interrupt that stamped it, so
    its timestamp is nearly its arrival; the stream's first batch and its last
    (cut short by the stream's end, not by the NIC's timer) are not, so the
    rate runs from the end of the first batch to the end of the last complete
    one, over :func:`wire_arrivals` (which keeps every rate at or below the
    link's). Without a link every datagram is its own batch.

    The 95% half-width: the run is cut at batch ends into up to
    :data:`RATE_BLOCKS` blocks; each block's duration less its share of the
    whole deviates by the difference of two arrival-time errors, as the whole
    run's does, so their spread (Student t) bounds the error of the duration.
    The duration's two ends are time stamps read to ``step_ns``, a Type B
    component combined with that spread (:func:`nicrig.analysis.quantity.expanded`),
    so a noiseless stream's rate still has the interval its clock allows.
    NaN with fewer than 4 blocks of 10 datagrams.
    """
    t = np.asarray(kernel_ns, dtype=np.int64)
    s = np.asarray(seq, dtype=np.int64)
    _, first = np.unique(s, return_index=True)
    keep = np.zeros(s.size, dtype=bool)
    keep[first] = True
    t = np.sort(t[keep & (t > 0)])
    n = int(t.size)
    nan = math.nan
    wire = link_rate_bps is not None and math.isfinite(link_rate_bps) and link_rate_bps > 0
    if n < 2:
        return ReceiveRate(n, nan, nan, nan, wire)
    frame_ns = wire_bytes_per_message(payload_bytes, mtu=mtu) * 8e9 / link_rate_bps if wire else 0.0
    a = wire_arrivals(t, frame_ns) if wire else t.astype(np.float64)
    # from the end of the first batch to the end of the last complete one (the stream's last batch ends at n - 1)
    ends = np.flatnonzero(np.diff(t) >= frame_ns / 2) if wire else np.arange(n)
    ends = ends if ends.size >= 2 else np.array([0, n - 1])
    lo, hi = int(ends[0]), int(ends[-1])
    duration = float(a[hi] - a[lo])
    if duration <= 0:
        return ReceiveRate(n, duration, nan, nan, wire)
    rate = (hi - lo) * payload_bytes * 8e3 / duration
    blocks = min(RATE_BLOCKS, (hi - lo) // 10, ends.size - 1)
    ci = nan
    ends_u = math.sqrt(2.0) * rectangular(step_ns)  # two time stamps, each read to the step
    if blocks >= 4:
        edges = np.unique(ends[np.round(np.linspace(0, ends.size - 1, blocks + 1)).astype(np.int64)])
        resid = np.diff(a[edges]) - np.diff(edges) * duration / (hi - lo)
        spread = math.sqrt(float(np.sum(resid ** 2)) / (edges.size - 2))
        ci = rate * expanded(spread, edges.size - 2, ends_u) / duration
    return ReceiveRate(hi - lo + 1, duration, rate, ci, wire, rate * ends_u / duration)


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


def point_rates(kernel_ns: np.ndarray, seq: np.ndarray, payload_bytes: int, *, link_rate_bps: float | None,
                mtu: int, wire_overhead_bytes: int, step_ns: float = 1.0) -> tuple[ReceiveRate, float]:
    """A stream's :func:`receive_rate` and the Ethernet wire rate (Mbit/s) of the same datagrams over the same time,
    each datagram counted as ``payload + wire_overhead_bytes`` bytes, at least a minimum frame with preamble and gap
    (:func:`nicrig.udpmon.sequence.wire_rate_bps`)."""
    from nicrig.udpmon.sequence import wire_rate_bps

    rate = receive_rate(kernel_ns, seq, payload_bytes, link_rate_bps=link_rate_bps, mtu=mtu, step_ns=step_ns)
    if not math.isfinite(rate.user_rate_mbps):
        return rate, math.nan
    return rate, wire_rate_bps(payload_bytes, rate.packets - 1, rate.duration_ns,
                               overhead_bytes=wire_overhead_bytes) / 1e6


def rates_from_received(points: np.ndarray, received: np.ndarray, *, link_rate_bps: float | None, mtu: int,
                        wire_overhead: int, step_ns: float = 1.0) -> np.ndarray:
    """A ``stream/points`` table with its rate columns recomputed by :func:`point_rates` from ``stream/received``
    (files of every format version: older ones computed them from the first and last timestamps), its time
    stamps read to ``step_ns``."""
    names = list(points.dtype.names)
    extra = [(c, "<f8") for c in ("user_rate_ci95_mbps", RESOLUTION_COLUMN) if c not in names]
    dtype = np.dtype(points.dtype.descr + extra) if extra else points.dtype
    out = np.zeros(len(points), dtype=dtype)
    for n in names:
        out[n] = points[n]
    order = np.argsort(received["point"], kind="stable")
    by_point = received[order]
    bounds = np.searchsorted(by_point["point"], out["point"], side="left"), \
        np.searchsorted(by_point["point"], out["point"], side="right")
    for k, (lo, hi) in enumerate(zip(*bounds)):
        mine = by_point[lo:hi]
        rate, wire = point_rates(mine["kernel_ns"], mine["seq"], int(out["size_bytes"][k]),
                                 link_rate_bps=link_rate_bps, mtu=mtu, wire_overhead_bytes=wire_overhead,
                                 step_ns=step_ns)
        out["user_rate_mbps"][k], out["user_rate_ci95_mbps"][k] = rate.user_rate_mbps, rate.user_rate_ci95_mbps
        out[RESOLUTION_COLUMN][k] = rate.resolution_u_mbps
        out["wire_rate_mbps"][k] = wire
    return out


@dataclass(frozen=True)
class SizeCurve:
    """One packet size's points per spacing (arrays sorted by spacing) over the rounds, and what they show.

    Per spacing: ``rounds`` measured; the user rate, its mean over the rounds
    and 95% half-width (Student t over the rounds; one round: the stream's
    own, :func:`receive_rate`); the wire rate's mean; datagrams sent and lost
    summed; CPU idle means; interrupts per packet received, summed over the
    rounds. ``max_user_rate_*`` at ``spacing_at_max_us`` is the highest mean.
    """

    size_bytes: int
    spacing_us: np.ndarray
    rounds: np.ndarray
    offered_mbps: np.ndarray
    user_rate_mbps: np.ndarray
    user_rate_ci95_mbps: np.ndarray
    wire_rate_mbps: np.ndarray
    sent: np.ndarray
    lost: np.ndarray
    loss_pct: np.ndarray
    receiver_cpu_idle_pct: np.ndarray
    sender_cpu_idle_pct: np.ndarray
    receiver_interrupts_per_packet: np.ndarray
    knee_spacing_us: float
    max_user_rate_mbps: float
    max_user_rate_ci95_mbps: float
    spacing_at_max_us: float
    theoretical_max_user_mbps: float
    frame_time_on_wire_us: float
    user_rate_resolution_u_mbps: np.ndarray | None = None
    max_user_rate_resolution_u_mbps: float = math.nan


def _over_rounds(values: np.ndarray, single_ci95: np.ndarray, resolution_u: np.ndarray) -> tuple[float, float, float]:
    """Mean of one spacing's per-round values, its 95% half-width (one round: that round's own) and the part of
    it the time stamps' resolution gives (``resolution_u``, per round: the same clock in every round, so it does
    not average out over them)."""
    ok = np.isfinite(values)
    v = values[ok]
    if v.size == 0:
        return math.nan, math.nan, math.nan
    res = resolution_u[ok]
    ub = float(np.max(res)) if np.isfinite(res).any() else 0.0
    if v.size == 1:
        return float(v[0]), float(single_ci95[ok][0]), ub
    return float(v.mean()), expanded(v.std(ddof=1) / math.sqrt(v.size), v.size - 1, ub), ub


def size_curves(points: np.ndarray, *, link_rate_bps: float | None = 1e9, mtu: int = 1500) -> list[SizeCurve]:
    """Per size, from a ``stream/points`` table: curves against spacing over the rounds, the knee, the maximum.

    ``link_rate_bps`` None: no Ethernet link between the hosts (loopback), so
    no theoretical maximum or frame time (NaN). Offered load is ``size x 8 /
    spacing`` (infinite at spacing 0). CPU idle is 100 - busy (NaN when
    unavailable); interrupts per packet are the receiver's interrupts over the
    packets it received (NaN when unknown in any round).
    """
    names = points.dtype.names
    curves = []
    for size in np.unique(points["size_bytes"]):
        p = points[points["size_bytes"] == size]
        spacing, where = np.unique(p["spacing_us"].astype(np.float64), return_inverse=True)
        single = p["user_rate_ci95_mbps"] if "user_rate_ci95_mbps" in names else np.full(len(p), np.nan)
        res_u = p[RESOLUTION_COLUMN] if RESOLUTION_COLUMN in names else np.zeros(len(p))
        n = spacing.size
        rate, rate_ci, rate_ub, wire = (np.full(n, np.nan) for _ in range(4))
        rounds, sent, lost, received = (np.zeros(n, np.int64) for _ in range(4))
        idle_r, idle_s, irq = np.full(n, np.nan), np.full(n, np.nan), np.full(n, np.nan)
        for k in range(n):
            mine = p[where == k]
            rounds[k] = len(mine)
            rate[k], rate_ci[k], rate_ub[k] = _over_rounds(mine["user_rate_mbps"].astype(np.float64),
                                                           single[where == k], res_u[where == k])
            w = mine["wire_rate_mbps"][np.isfinite(mine["wire_rate_mbps"])]
            wire[k] = w.mean() if w.size else np.nan
            sent[k], lost[k], received[k] = mine["sent"].sum(), mine["lost"].sum(), mine["received"].sum()
            with np.errstate(invalid="ignore"):
                idle_r[k] = 100.0 - np.mean(mine["remote_cpu_busy_pct"])
                idle_s[k] = 100.0 - np.mean(mine["local_cpu_busy_pct"])
            if (mine["remote_interrupts"] >= 0).all() and received[k] > 0:
                irq[k] = mine["remote_interrupts"].sum() / received[k]
        count = received + lost
        with np.errstate(divide="ignore", invalid="ignore"):
            offered = np.where(spacing > 0, int(size) * 8 / spacing, np.inf)
            loss = np.where(count > 0, 100.0 * lost / count, np.nan)
        best = int(np.nanargmax(rate)) if np.isfinite(rate).any() else 0
        curves.append(SizeCurve(
            size_bytes=int(size), spacing_us=spacing, rounds=rounds, offered_mbps=offered, user_rate_mbps=rate,
            user_rate_ci95_mbps=rate_ci, wire_rate_mbps=wire, sent=sent, lost=lost, loss_pct=loss,
            receiver_cpu_idle_pct=idle_r, sender_cpu_idle_pct=idle_s, receiver_interrupts_per_packet=irq,
            knee_spacing_us=knee_spacing_us(spacing, lost),
            max_user_rate_mbps=float(rate[best]) if n else math.nan,
            max_user_rate_ci95_mbps=float(rate_ci[best]) if n else math.nan,
            spacing_at_max_us=float(spacing[best]) if n else math.nan,
            theoretical_max_user_mbps=(theoretical_max_user_mbps(int(size), link_rate_bps, mtu=mtu)
                                       if link_rate_bps else math.nan),
            frame_time_on_wire_us=(wire_bytes_per_message(int(size), mtu=mtu) * 8 / link_rate_bps * 1e6
                                   if link_rate_bps else math.nan),
            user_rate_resolution_u_mbps=rate_ub,
            max_user_rate_resolution_u_mbps=float(rate_ub[best]) if n else math.nan,
        ))
    return curves


def _listed(spacings: np.ndarray) -> str:
    """"0, 10 and 20 us"."""
    said = [setting(float(v)) for v in spacings]
    return (", ".join(said[:-1]) + " and " + said[-1] if len(said) > 1 else said[0]) + " us"


def _unresolved_rival(c: SizeCurve) -> int | None:
    """The spacing whose rate comes closest to the best one while their 95% intervals overlap (None: the best
    stands clear of every other spacing, or there is no other)."""
    best = int(np.nanargmax(c.user_rate_mbps)) if np.isfinite(c.user_rate_mbps).any() else -1
    if best < 0:
        return None
    low = c.user_rate_mbps[best] - np.nan_to_num(c.user_rate_ci95_mbps[best], nan=np.inf)
    reach = c.user_rate_mbps + np.nan_to_num(c.user_rate_ci95_mbps, nan=np.inf)
    overlap = [k for k in range(c.user_rate_mbps.size) if k != best and np.isfinite(c.user_rate_mbps[k])
               and reach[k] >= low]
    return max(overlap, key=lambda k: c.user_rate_mbps[k]) if overlap else None


def interpret_curve(c: SizeCurve, best_table: str = BEST_TABLE, points_table: str = POINTS_TABLE,
                    row: str = "") -> Sentence:
    """One sentence on a size's curve, every number one the tables show (quoted from ``best_table``, in the row
    whose first cell is ``row``, and ``points_table``): its best rate against the link's, where packets were lost,
    and, where the loss falls off at a knee, what limits the rate (Hughes-Jones et al. 2003, §4.1.2, §4.2.2)."""
    q = Quotes()
    row = row or str(c.size_bytes)
    best = q.measured(best_table, BEST_RATE, BEST_RATE_U, c.max_user_rate_mbps, c.max_user_rate_ci95_mbps,
                      "Mbit/s", row)
    at = f"at {setting(c.spacing_at_max_us)} us spacing"
    given = [f"{setting(float(v))} us" for v in c.spacing_us]
    unresolved = not c.max_user_rate_ci95_mbps < c.max_user_rate_mbps  # NaN: no interval, nothing resolved
    rival = _unresolved_rival(c)
    if unresolved:
        text = (f"{c.size_bytes} bytes: the highest mean rate, {best} {at}, is not resolved: its 95% interval "
                "reaches zero (the rounds disagree; more rounds would narrow it)")
    elif rival is not None:
        other = q.measured(points_table, POINT_RATE, POINT_RATE_U, c.user_rate_mbps[rival],
                           c.user_rate_ci95_mbps[rival], "Mbit/s")
        text = (f"{c.size_bytes} bytes: at best {best} {at} (not resolved from {other} at "
                f"{setting(float(c.spacing_us[rival]))} us: their 95% intervals overlap)")
    else:
        text = f"{c.size_bytes} bytes: at best {best} {at}"
    if not unresolved and math.isfinite(c.theoretical_max_user_mbps):
        share = 100 * c.max_user_rate_mbps / c.theoretical_max_user_mbps
        share_ci = 100 * c.max_user_rate_ci95_mbps / c.theoretical_max_user_mbps
        text += (f", {q.measured(best_table, SHARE, SHARE_U, share, share_ci, '%', row)} of the "
                 f"{q(best_table, LINK_ALLOWS, number(c.theoretical_max_user_mbps), row)} Mbit/s the link allows")
    lossy = c.spacing_us[c.lost > 0]
    clean = c.spacing_us[c.lost == 0]
    if lossy.size == 0:
        return q.sentence(text + "; nothing was lost at any spacing.", given=given)
    if clean.size == 0:
        return q.sentence(text + f"; packets were lost at every spacing measured, {_listed(c.spacing_us)}.",
                          given=given)
    if lossy.max() > clean.min():
        return q.sentence(text + (f"; packets were lost at {_listed(lossy)} spacing but not at {_listed(clean)}: the "
                                  "loss does not fall off as the spacing widens, so there is no knee to read."),
                          given=given)
    text += f"; no loss from {setting(c.knee_spacing_us)} us spacing on, loss at {_listed(lossy)}"
    # A quote is registered when it is made: only a sentence that states the wire's time makes it.
    def wire() -> str:
        return q(best_table, FRAME_ON_WIRE, number(c.frame_time_on_wire_us), row)
    if c.knee_spacing_us <= 1.05 * c.frame_time_on_wire_us:
        return q.sentence(text + f", the frame's own time on the wire ({wire()} us): the link is the limit.",
                          given=given)
    below = c.spacing_us < c.knee_spacing_us
    idle = c.receiver_cpu_idle_pct[below]
    if idle.size and np.isfinite(idle).any() and np.nanmin(idle) < 20:
        least = q(points_table, CPU_IDLE, number(np.nanmin(idle), decimals=0))
        return q.sentence(text + (f", where the receiver's CPU was idle as little as {least}% of the time: the "
                                  f"receiving host cannot keep up ({HUGHES_JONES}, §4.1.2: losses in its IP layer)."),
                          given=given)
    if math.isfinite(c.frame_time_on_wire_us):
        return q.sentence(text + (f"; the knee is wider than the {wire()} us the wire needs: the receiving host or its "
                                  "bus is the limit."), given=given)
    return q.sentence(text + ".", given=given)
