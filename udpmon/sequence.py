"""What a udpmon receiver makes of the sequence numbers and times it recorded.

UDPmon (Hughes-Jones et al. 2003, §3.2) reports for every test point
the packets received, lost and out of order, the distribution of the lost
packets and the received inter-packet spacing.  The C engine hands us NumPy
arrays: the ``seq`` field of the nicrig header (:mod:`nicrig.udpmon.payload`)
of every datagram in the order it arrived, and arrival (or send) times in
nanoseconds.  Everything here is a pure function of those arrays, vectorized:
no Python loop runs per packet.

Definitions (``sent`` packets were numbered 0 .. sent-1):

received
    distinct sequence numbers in 0 .. sent-1 that arrived at least once.
duplicates
    extra copies: arrivals of a number in range that had already arrived.
foreign
    arrivals whose number is outside 0 .. sent-1 (another test, corruption);
    they count nowhere else.
lost
    ``sent - received``.
out of order
    RFC 4737 section 3 "reordered" singleton: an arrival whose number is lower than
    the highest number that arrived before it (equivalently, lower than
    NextExp, the highest so far plus one).  Only the first copy of each number
    is considered (RFC 4737 notes duplicates, then analyses only first copies),
    and foreign numbers are left out.
reordering extent
    RFC 4737 section 4.2: for a reordered packet at arrival position ``i``
    (positions counted over the first copies above), ``i - j`` where ``j`` is
    the earliest position whose number is greater than this packet's.
lost runs
    maximal blocks of consecutive missing numbers, in sequence order; a lone
    loss is a run of length 1.  ``lost_run_histogram[k]`` is how many runs have
    length ``k`` (index 0 is always 0).  The accounting itself takes memory
    and time in proportion to the arrivals, whatever ``sent`` is; only
    ``lost_seqs`` and the dense histogram grow with the losses.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

# Bytes on an Ethernet wire per UDP/IPv4 datagram beyond its payload:
# preamble + SFD 8, inter-frame gap 12, Ethernet header 14 + FCS 4, IPv4 20 + UDP 8.
PREAMBLE_SFD_BYTES = 8
INTERFRAME_GAP_BYTES = 12
ETHERNET_HEADER_FCS_BYTES = 18
IPV4_UDP_HEADER_BYTES = 28
WIRE_OVERHEAD_BYTES = PREAMBLE_SFD_BYTES + INTERFRAME_GAP_BYTES + ETHERNET_HEADER_FCS_BYTES + IPV4_UDP_HEADER_BYTES
# Hughes-Jones et al. 2003 counted 60 bytes of overhead per datagram.
HUGHES_JONES_2003_OVERHEAD_BYTES = 60
# The shortest frame (64 bytes, header to FCS) plus preamble, SFD and gap.
MIN_WIRE_BYTES = 64 + PREAMBLE_SFD_BYTES + INTERFRAME_GAP_BYTES

_EMPTY = np.zeros(0, dtype=np.int64)


@dataclass(frozen=True, eq=False)
class SequenceStats:
    """The sequence-number accounting of one test point (definitions in the module docstring).

    Counts are packets.  Arrays are ``int64``.
    """

    sent: int
    arrivals: int  # datagrams handed in, every kind
    received: int
    duplicates: int
    foreign: int
    lost: int
    out_of_order: int
    reorder_extents: npt.NDArray[np.int64]  # one per reordered packet, in arrival order
    lost_run_starts: npt.NDArray[np.int64]  # first number of each run, ascending
    lost_runs: npt.NDArray[np.int64]  # length of each run, same order

    @property
    def max_reorder_extent(self) -> int:
        """The largest reordering extent, 0 when nothing was reordered."""
        return int(self.reorder_extents.max()) if self.reorder_extents.size else 0

    @property
    def loss_fraction(self) -> float:
        """``lost / sent`` (0.0 when nothing was sent)."""
        return self.lost / self.sent if self.sent else 0.0

    @property
    def lost_seqs(self) -> npt.NDArray[np.int64]:
        """The missing numbers, ascending (``lost`` of them: built on demand)."""
        runs = self.lost_runs
        offsets = np.arange(int(runs.sum()), dtype=np.int64) - np.repeat(np.cumsum(runs) - runs, runs)
        return np.repeat(self.lost_run_starts, runs) + offsets

    @property
    def lost_run_histogram(self) -> npt.NDArray[np.int64]:
        """``[k]`` = how many runs of exactly ``k`` lost packets; ``[0]`` is 0.  Length: longest run + 1."""
        return np.bincount(self.lost_runs, minlength=1).astype(np.int64)

    def lost_run_counts(self) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """The same histogram, sparse: ``(run lengths ascending, number of runs of each)``."""
        lengths, counts = np.unique(self.lost_runs, return_counts=True)
        return lengths.astype(np.int64), counts.astype(np.int64)

    def to_dict(self, *, arrays: bool = False) -> dict[str, Any]:
        """JSON-ready summary (run histogram sparse); ``arrays=True`` adds the per-packet and per-run arrays."""
        lengths, counts = self.lost_run_counts()
        out: dict[str, Any] = {
            "sent": self.sent, "arrivals": self.arrivals, "received": self.received,
            "duplicates": self.duplicates, "foreign": self.foreign, "lost": self.lost,
            "out_of_order": self.out_of_order, "max_reorder_extent": self.max_reorder_extent,
            "lost_run_lengths": lengths.tolist(), "lost_run_counts": counts.tolist(),
        }
        if arrays:
            out.update(reorder_extents=self.reorder_extents.tolist(), lost_seqs=self.lost_seqs.tolist(),
                       lost_run_starts=self.lost_run_starts.tolist(), lost_runs=self.lost_runs.tolist())
        return out


def _integer_1d(values: npt.ArrayLike, name: str) -> np.ndarray:
    a = np.asarray(values)
    if a.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {a.shape}")
    if a.size == 0:
        return a.astype(np.int64)
    if a.dtype.kind not in "iu":
        raise TypeError(f"{name} must hold integers, got dtype {a.dtype}")
    return a


def sequence_stats(seq_arrival_order: npt.ArrayLike, sent: int) -> SequenceStats:
    """Account for ``sent`` numbered packets (0 .. sent-1) from the numbers that arrived.

    ``seq_arrival_order`` holds one sequence number per received datagram, in
    arrival order, any integer dtype (``uint32`` from the wire is fine).
    Definitions of every count are in the module docstring (RFC 4737 for
    reordering).
    """
    sent = int(sent)
    if sent < 0:
        raise ValueError(f"sent must be >= 0, got {sent}")
    arr = _integer_1d(seq_arrival_order, "seq_arrival_order")

    in_range = arr < sent
    if arr.dtype.kind == "i":
        in_range &= arr >= 0
    valid = arr[in_range].astype(np.int64)
    foreign = int(arr.size - valid.size)

    # First copy of each number, kept in arrival order.
    # Stable sorts (timsort/radix) are near linear on the nearly ordered streams a test produces.
    order = np.argsort(valid, kind="stable")
    ordered = valid[order]
    is_first = np.ones(ordered.size, dtype=bool)
    is_first[1:] = ordered[1:] != ordered[:-1]
    unique_seqs = ordered[is_first]
    firsts = valid[np.sort(order[is_first], kind="stable")]
    received = int(unique_seqs.size)

    # RFC 4737: reordered when below the highest number seen before it.
    running_max = np.maximum.accumulate(firsts) if firsts.size else _EMPTY
    prior_max = np.concatenate(([-1], running_max[:-1])) if firsts.size else _EMPTY
    reordered = np.flatnonzero(firsts < prior_max)
    # Extent: position minus the earliest position holding a greater number,
    # which is where the (non-decreasing) running maximum first exceeds it.
    earliest_greater = np.searchsorted(running_max, firsts[reordered], side="right")
    extents = (reordered - earliest_greater).astype(np.int64)

    # Runs of missing numbers are the gaps between successive received numbers
    # (with -1 and ``sent`` as sentinels): memory grows with arrivals, not with ``sent``.
    bounds = np.concatenate(([-1], unique_seqs, [sent]))
    gaps = np.diff(bounds) - 1
    has_gap = gaps > 0
    run_starts = (bounds[:-1][has_gap] + 1).astype(np.int64)
    runs = gaps[has_gap].astype(np.int64)

    return SequenceStats(
        sent=sent, arrivals=int(arr.size), received=received, duplicates=int(valid.size - received),
        foreign=foreign, lost=sent - received, out_of_order=int(reordered.size), reorder_extents=extents,
        lost_run_starts=run_starts, lost_runs=runs,
    )


def spacing_histogram(times_ns: npt.ArrayLike, bin_ns: int = 1000,
                      max_ns: int | None = None) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Histogram of the spacing between successive packets, in nanoseconds.

    ``times_ns`` are integer times (ns) of the packets in the order they were
    received (or sent); the spacings are ``np.diff(times_ns)`` and must not be
    negative.  Returns ``(edges_ns, counts)`` as :func:`numpy.histogram` does:
    bin ``i`` counts spacings ``s`` with ``edges_ns[i] <= s < edges_ns[i+1]``,
    and ``counts.sum() == len(times_ns) - 1`` (every spacing is counted).

    The regular bins are ``bin_ns`` wide from 0.  Without ``max_ns`` they run
    just past the largest spacing.  With ``max_ns`` (rounded up to a multiple
    of ``bin_ns``) they stop there, and spacings at or above it go into one
    wider overflow bin ``[max_ns, largest + 1)``, added only when needed.
    """
    if bin_ns <= 0:
        raise ValueError(f"bin_ns must be > 0, got {bin_ns}")
    t = _integer_1d(times_ns, "times_ns").astype(np.int64)
    spacing = np.diff(t) if t.size > 1 else _EMPTY
    if spacing.size and spacing.min() < 0:
        at = int(np.argmin(spacing))
        raise ValueError(f"times_ns go backwards at index {at + 1} ({int(t[at])} then {int(t[at + 1])} ns)")
    largest = int(spacing.max()) if spacing.size else 0
    if max_ns is None:
        nbins = largest // bin_ns + 1
    else:
        if max_ns <= 0:
            raise ValueError(f"max_ns must be > 0, got {max_ns}")
        nbins = -(-int(max_ns) // bin_ns)
    edges = np.arange(nbins + 1, dtype=np.int64) * bin_ns
    index = spacing // bin_ns
    overflow = index >= nbins
    counts = np.bincount(index[~overflow], minlength=nbins).astype(np.int64)
    if overflow.any():
        edges = np.append(edges, largest + 1)
        counts = np.append(counts, np.int64(np.count_nonzero(overflow)))
    return edges, counts


def rate_bps(bytes_per_packet: float, packets: int, duration_ns: float, overhead_bytes: float = 0) -> float:
    """Bit rate, bits per second, of ``packets`` of ``bytes_per_packet + overhead_bytes`` in ``duration_ns``.

    With ``overhead_bytes=0`` and the UDP payload size this is the user data
    rate; with :data:`WIRE_OVERHEAD_BYTES` (66) it is the Ethernet wire rate
    (or use :func:`wire_rate_bps`, which also pads short frames); Hughes-Jones et al. 2003
    used :data:`HUGHES_JONES_2003_OVERHEAD_BYTES` (60).
    """
    if duration_ns <= 0:
        raise ValueError(f"duration_ns must be > 0, got {duration_ns}")
    return 8.0 * (bytes_per_packet + overhead_bytes) * packets * 1e9 / duration_ns


def wire_rate_bps(payload_bytes: int, packets: int, duration_ns: float,
                  overhead_bytes: int = WIRE_OVERHEAD_BYTES, min_wire_bytes: int = MIN_WIRE_BYTES) -> float:
    """Ethernet wire rate (bits/s) of ``packets`` UDP datagrams of ``payload_bytes`` each.

    Each occupies ``max(payload_bytes + overhead_bytes, min_wire_bytes)`` byte
    times on the wire: a payload under 18 bytes is padded to the 64-byte
    minimum frame.  Pass ``min_wire_bytes=0`` to count the overhead alone.
    """
    return rate_bps(max(payload_bytes + overhead_bytes, min_wire_bytes), packets, duration_ns)
