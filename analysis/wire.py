"""What a wire source says about a udpmon run: every datagram's frame on the wire, beside the engine's records.

A run recorded with ``--capture`` (:mod:`nicrig.udpmon.wiretap`) holds the frames the interface
carried, decoded into the ``ethernet`` table (:mod:`nicrig.decoders.wire_frames`), on the engine's
clock (CLOCK_MONOTONIC, ns). The engine recorded, per datagram, when it called ``send()`` (a stream's
``stream/sent``, a latency run's ``latency/rtt``) and when a receive call returned it (the far
engine's ``stream/received``, whose clock the run's offset puts on this host's; a latency response's
``t_ns + rtt_ns``). A datagram is matched to its frames by the engine's payload header
(:mod:`nicrig.udpmon.payload`): its kind and sequence number, in the UDP ports of its point or visit
(recorded with the run), within that point's or visit's time on the wire; a later IP fragment
carries the first one's sequence number (the ethernet decoder's table of fragmented datagrams).

Per datagram:

- ``host_to_wire_ns``: from the send call to its first frame leaving (outbound);
- ``wire_to_host_ns``: from its last frame on the receiving side (inbound where the capture saw
  the receiving side, as on loopback; else the outbound frame itself, on a capture at the sending
  end of a point-to-point link) to the receive call's return.

Datagrams without a frame, and frames of the test without a datagram, are counted, never paired
with another datagram's. Pure functions of the tables.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

KIND_STREAM, KIND_REQUEST, KIND_RESPONSE = 1, 2, 3
#: Later fragments of a datagram follow its first within this (ns).
FRAGMENT_SPAN_NS = 10_000_000
PAIR_DTYPE = np.dtype([
    ("point", "<i4"), ("seq", "<i8"), ("size_bytes", "<i4"), ("sent_ns", "<i8"), ("wire_out_ns", "<i8"),
    ("wire_in_ns", "<i8"), ("received_ns", "<i8"), ("host_to_wire_ns", "<i8"), ("wire_to_host_ns", "<i8"),
])
#: Unknown times and delays in :data:`PAIR_DTYPE` rows.
NONE = np.iinfo(np.int64).min


@dataclass(frozen=True)
class Pairing:
    """A run's datagrams against the wire.

    ``rows`` (:data:`PAIR_DTYPE`): one per datagram sent (``point``: the stream point or latency visit);
    ``sent``: datagrams sent; ``on_wire``: of them, with their outbound frame; ``received``: receive records;
    ``received_on_wire``: of them, with their frame; ``stray_frames``: frames of the tests that match no send
    record. ``far_offset_ns`` (± ``far_uncertainty_ns``) was added to the far engine's times.
    """

    kind: str
    rows: np.ndarray
    sent: int
    on_wire: int
    received: int
    received_on_wire: int
    stray_frames: int
    far_offset_ns: float = 0.0
    far_uncertainty_ns: float = 0.0

    @property
    def share(self) -> float:
        """Share of the datagrams sent that were paired with their frame on the wire (0..1)."""
        return self.on_wire / self.sent if self.sent else float("nan")


def _frames_of(eth: np.ndarray, kind: int, sport: int, dport: int, t0: int, t1: int) -> np.ndarray:
    """First frames (fragment offset 0) of ``kind`` with these UDP ports (-1: any) in ``[t0, t1)``."""
    keep = (eth["nicrig_kind"] == kind) & (eth["frag_offset"] <= 0) & (eth["t_ns"] >= t0) & (eth["t_ns"] < t1)
    if sport >= 0:
        keep &= eth["udp_sport"] == sport
    if dport >= 0:
        keep &= eth["udp_dport"] == dport
    return eth[keep]


def _by_seq(frames: np.ndarray, direction: bytes | None, last: bool) -> dict[int, int]:
    """seq -> time of the first (or last) frame of that seq (of ``direction``, None: any)."""
    rows = frames if direction is None else frames[frames["direction"] == direction]
    order = np.argsort(rows["t_ns"], kind="stable")
    out: dict[int, int] = {}
    for seq, t in zip(rows["seq"][order].tolist(), rows["t_ns"][order].tolist()):
        if last or seq not in out:
            out[seq] = t
    return out


def _datagram_ends(eth: np.ndarray, firsts: np.ndarray, kind: int) -> np.ndarray:
    """Per first frame, the time of its datagram's last frame: the latest later fragment of the same kind, sequence
    number, addresses and direction within :data:`FRAGMENT_SPAN_NS`, else the first frame's own time."""
    ends = firsts["t_ns"].copy()
    later = eth[(eth["nicrig_kind"] == kind) & (eth["frag_offset"] > 0)]
    if not len(later) or not len(firsts):
        return ends
    for i, f in enumerate(firsts):
        same = later[(later["seq"] == f["seq"]) & (later["ip_src"] == f["ip_src"]) & (later["ip_dst"] == f["ip_dst"])
                     & (later["direction"] == f["direction"]) & (later["t_ns"] >= f["t_ns"])
                     & (later["t_ns"] < f["t_ns"] + FRAGMENT_SPAN_NS)]
        if len(same):
            ends[i] = int(same["t_ns"].max())
    return ends


def _sides(frames: np.ndarray, eth: np.ndarray, kind: int) -> tuple[dict[int, int], dict[int, int]]:
    """(seq -> outbound first frame, seq -> receiving side's last frame): inbound frames where the capture has any
    of the test, else the outbound ones (one wire, seen from its sending end)."""
    out_dir = b"tx" if (frames["direction"] == b"tx").any() else None
    inbound = frames[frames["direction"] == b"rx"]
    side = inbound if len(inbound) else (frames if out_dir is None else frames[frames["direction"] == b"tx"])
    ends = side.copy()
    ends["t_ns"] = _datagram_ends(eth, side, kind)
    return _by_seq(frames, out_dir, last=False), _by_seq(ends, None, last=True)


def _blank(n: int) -> np.ndarray:
    rows = np.zeros(n, PAIR_DTYPE)
    for name in ("wire_out_ns", "wire_in_ns", "received_ns", "host_to_wire_ns", "wire_to_host_ns"):
        rows[name] = NONE
    return rows


def _fill(rows: np.ndarray, mine: np.ndarray, out: dict[int, int], back: dict[int, int], when: dict[int, int]
          ) -> tuple[int, int, int]:
    """Rows ``mine`` (one point's or visit's datagrams) given their frames out (seq -> ns), their frames on the
    receiving side and their receive times; (sent with a frame, received with a frame, stray frames)."""
    seqs = rows["seq"][mine].tolist()
    on_wire = got_on_wire = 0
    for i, seq in zip(mine.tolist(), seqs):
        if seq in out:
            rows["wire_out_ns"][i] = out[seq]
            rows["host_to_wire_ns"][i] = out[seq] - rows["sent_ns"][i]
            on_wire += 1
        if seq in back:
            rows["wire_in_ns"][i] = back[seq]
        if seq in when:
            rows["received_ns"][i] = when[seq]
            if seq in back:
                rows["wire_to_host_ns"][i] = when[seq] - back[seq]
                got_on_wire += 1
    return on_wire, got_on_wire, len(set(out) - set(seqs))


def pair_stream(points: np.ndarray, sent: np.ndarray, received: np.ndarray, eth: np.ndarray,
                far_offset_ns: float = 0.0, far_uncertainty_ns: float = 0.0) -> Pairing:
    """A stream run's datagrams (``stream/points``, ``sent``, ``received``) against its wire's ``eth`` table."""
    ok = sent[sent["t_ns"] >= 0]
    starts = {int(p): int(ok["t_ns"][ok["point"] == p].min()) for p in np.unique(ok["point"])}
    order = sorted(starts, key=starts.get)
    rows = _blank(len(ok))
    rows["point"], rows["seq"], rows["sent_ns"] = ok["point"], ok["seq"], ok["t_ns"]
    known = "local_port" in (points.dtype.names or ())
    ports = {int(r["point"]): (int(r["local_port"]), int(r["remote_port"])) if known else (-1, -1) for r in points}
    sizes = {int(r["point"]): int(r["size_bytes"]) for r in points}
    totals = np.zeros(3, np.int64)
    got = 0
    for k, p in enumerate(order):
        t1 = starts[order[k + 1]] if k + 1 < len(order) else np.iinfo(np.int64).max
        frames = _frames_of(eth, KIND_STREAM, *ports.get(p, (-1, -1)), starts[p], t1)
        out, back = _sides(frames, eth, KIND_STREAM)
        mine = np.flatnonzero(rows["point"] == p)
        rows["size_bytes"][mine] = sizes.get(p, -1)
        arrived = received[received["point"] == p]
        first_copy = np.unique(arrived["seq"], return_index=True)[1]
        when = {int(s): int(t) + round(far_offset_ns) for s, t in
                zip(arrived["seq"][first_copy].tolist(), arrived["user_ns"][first_copy].tolist())}
        got += len(when)
        totals += _fill(rows, mine, out, back, when)
    return Pairing("stream", rows, len(ok), int(totals[0]), got, int(totals[1]), int(totals[2]), far_offset_ns,
                   far_uncertainty_ns)


def pair_latency(visits: np.ndarray, rtt: np.ndarray, eth: np.ndarray) -> Pairing:
    """A latency run's requests and responses (``latency/visits``, ``latency/rtt``) against its wire's ``eth`` table:
    ``host_to_wire``: request send to its frame out; ``wire_to_host``: the response's last frame in to the receive
    call's return (both on this host's clock)."""
    rows = _blank(len(rtt))
    totals = np.zeros(3, np.int64)
    got = 0
    for v, visit in enumerate(visits):
        mine = np.flatnonzero((rtt["round"] == visit["round"]) & (rtt["position"] == visit["position"]))
        rows["point"][mine], rows["seq"][mine] = v, rtt["seq"][mine]
        rows["size_bytes"][mine] = rtt["size_bytes"][mine]
        rows["sent_ns"][mine] = rtt["t_ns"][mine]
        local, remote = int(visit["local_port"]), int(visit["remote_port"])
        t0, t1 = int(visit["start_ns"]), int(visit["end_ns"]) + FRAGMENT_SPAN_NS
        out, _ = _sides(_frames_of(eth, KIND_REQUEST, local, remote, t0, t1), eth, KIND_REQUEST)
        _, back = _sides(_frames_of(eth, KIND_RESPONSE, remote, local, t0, t1), eth, KIND_RESPONSE)
        answered = mine[rtt["rtt_ns"][mine] >= 0]
        when = {int(rtt["seq"][i]): int(rtt["t_ns"][i] + rtt["rtt_ns"][i]) for i in answered.tolist()}
        got += len(when)
        totals += _fill(rows, mine, out, back, when)
    return Pairing("latency", rows, len(rtt), int(totals[0]), got, int(totals[1]), int(totals[2]))


@dataclass(frozen=True)
class Delays:
    """One delay over some datagrams: count, median, 10th and 90th percentile (ns); NaN without any."""

    count: int
    median_ns: float
    p10_ns: float
    p90_ns: float


def delays(values: np.ndarray) -> Delays:
    """Summary of a delay column of :data:`PAIR_DTYPE` rows, its unknowns left out."""
    v = values[values != NONE].astype(np.float64)
    if not len(v):
        return Delays(0, float("nan"), float("nan"), float("nan"))
    p10, med, p90 = np.percentile(v, [10, 50, 90])
    return Delays(len(v), float(med), float(p10), float(p90))


def median_ci95_ns(values: np.ndarray, half_width_ns: float) -> float:
    """95 % half-width of a median delay (ns): the distribution-free interval of the median (the order statistics
    n/2 ± 1.96 √n / 2, a binomial with p = 1/2) combined with a rectangular Type B component of half-width
    ``half_width_ns`` (GUM, JCGM 100:2008, §4.3.7): the two stamps' quantisation and the offsets that put their
    clocks on one timeline."""
    v = np.sort(values[values != NONE].astype(np.float64))
    n = len(v)
    if n == 0:
        return float("nan")
    half = 1.96 * np.sqrt(n) / 2
    lo, hi = int(max(np.floor(n / 2 - half), 0)), int(min(np.ceil(n / 2 + half), n - 1))
    return float(np.hypot((v[hi] - v[lo]) / 2, 1.96 * half_width_ns / np.sqrt(3)))
