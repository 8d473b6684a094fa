"""Request-response latency: per-size statistics, histograms, and the slope/intercept fit of seed 002.

Seed 002 section 3.1: the round-trip time plotted against the response size
is a line whose slope (us/byte) is the sum of the inverse transfer rates of
the path's store-and-forward elements, and whose intercept (us) is the sum of
fixed latencies and per-packet processing. A response longer than one MTU
needs further frames, which adds a step (figure 4.1): the fit is therefore
made separately for each number of frames per response.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats

IPV4_HEADER_BYTES = 20
UDP_HEADER_BYTES = 8
PERCENTILES = (1, 5, 10, 25, 75, 90, 95, 99)


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


@dataclass(frozen=True)
class RttStats:
    """Statistics of one response size's round trips, in microseconds (timeouts excluded, counted)."""

    count: int
    timeouts: int
    min_us: float
    mean_us: float
    median_us: float
    max_us: float
    std_us: float
    percentiles_us: dict[int, float]
    fwhm_us: float


def histogram(rtt_us: np.ndarray, bin_us: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """Histogram of round-trip times: (left bin edges in us, counts), bins ``bin_us`` wide from the minimum."""
    rtt_us = np.asarray(rtt_us, dtype=np.float64)
    if rtt_us.size == 0:
        return np.zeros(0), np.zeros(0, dtype=np.int64)
    lo = math.floor(rtt_us.min() / bin_us) * bin_us
    n = int(math.floor((rtt_us.max() - lo) / bin_us)) + 1
    counts = np.bincount(np.floor((rtt_us - lo) / bin_us).astype(np.int64), minlength=n)
    return lo + bin_us * np.arange(n), counts


def fwhm(edges_us: np.ndarray, counts: np.ndarray) -> float:
    """Full width at half maximum of a histogram's peak, in us (seed 002 3.1: ~2 us, 1.5 us in 6.2).

    The run of bins at or above half the highest count that contains the
    highest bin, each bin counted whole (outliers elsewhere do not widen it);
    0 for an empty histogram.
    """
    if counts.size == 0 or counts.max() == 0:
        return 0.0
    peak = int(np.argmax(counts))
    below = counts < counts.max() / 2
    left = peak - int(np.argmax(below[:peak][::-1])) if below[:peak].any() else 0
    right = peak + int(np.argmax(below[peak:])) if below[peak:].any() else counts.size
    width = edges_us[1] - edges_us[0] if edges_us.size > 1 else 1.0
    return float((right - left) * width)


def rtt_stats(rtt_ns: np.ndarray, bin_us: float = 1.0) -> RttStats:
    """Statistics of round trips given in ns; negative entries are timeouts."""
    rtt_ns = np.asarray(rtt_ns)
    ok = rtt_ns[rtt_ns >= 0] / 1000.0
    if ok.size == 0:
        nan = float("nan")
        return RttStats(0, int(rtt_ns.size), nan, nan, nan, nan, nan, {p: nan for p in PERCENTILES}, nan)
    edges, counts = histogram(ok, bin_us)
    return RttStats(
        count=int(ok.size), timeouts=int(rtt_ns.size - ok.size),
        min_us=float(ok.min()), mean_us=float(ok.mean()), median_us=float(np.median(ok)), max_us=float(ok.max()),
        std_us=float(ok.std(ddof=1)) if ok.size > 1 else 0.0,
        percentiles_us={p: float(v) for p, v in zip(PERCENTILES, np.percentile(ok, PERCENTILES))},
        fwhm_us=fwhm(edges, counts),
    )


@dataclass(frozen=True)
class LineFit:
    """RTT = intercept + slope x size over the sizes needing ``frames`` frames, with 95% confidence half-widths.

    ``rejected_sizes``: sizes left out as outliers (only when the fit was asked to reject them).
    """

    frames: int
    points: int
    slope_us_per_byte: float
    slope_ci95: float
    intercept_us: float
    intercept_ci95: float
    r: float
    rejected_sizes: tuple[int, ...] = ()


#: Residuals beyond this many robust standard deviations (1.4826 x MAD about
#: the Theil-Sen line) mark a size as an outlier: a size disturbed by other
#: activity on the hosts, not a property of the path.
OUTLIER_SIGMAS = 4.0


def inliers(size_bytes: np.ndarray, rtt_us: np.ndarray, sigmas: float = OUTLIER_SIGMAS) -> np.ndarray:
    """Mask of the points that lie near the robust (Theil-Sen) line through them.

    The Theil-Sen slope (the median of pairwise slopes) ignores up to ~29% of
    wild points, so one bad size cannot drag the line it is judged against.
    """
    slope = stats.theilslopes(rtt_us, size_bytes).slope
    resid = rtt_us - slope * size_bytes
    dev = resid - np.median(resid)  # about the line through the median residual (Theil-Sen's "joint" intercept)
    scale = 1.4826 * np.median(np.abs(dev))
    # an exact line has zero scatter: only then does float noise decide, so allow it
    tolerance = max(sigmas * scale, 1e-9 * max(1.0, float(np.abs(rtt_us).max())))
    return np.abs(dev) <= tolerance


def fit_latency(size_bytes: np.ndarray, rtt_us: np.ndarray, mtu: int = 1500, *,
                reject_outliers: bool = False) -> list[LineFit]:
    """Fit RTT (us; per size, e.g. the minimum or the mean) against response size, per number of frames.

    Groups with fewer than three sizes are not fitted (no confidence interval).
    With ``reject_outliers`` the sizes far off the robust line (:func:`inliers`)
    are left out of the least-squares fit and listed in ``rejected_sizes``.
    """
    size_bytes = np.asarray(size_bytes, dtype=np.float64)
    rtt_us = np.asarray(rtt_us, dtype=np.float64)
    keep = np.isfinite(rtt_us)
    size_bytes, rtt_us = size_bytes[keep], rtt_us[keep]
    frames = np.array([frames_per_message(int(s), mtu) for s in size_bytes], dtype=np.int64)
    fits = []
    for k in np.unique(frames):
        x, y = size_bytes[frames == k], rtt_us[frames == k]
        rejected: tuple[int, ...] = ()
        if reject_outliers and x.size >= 3 and np.ptp(x) > 0:
            good = inliers(x, y)
            rejected = tuple(int(v) for v in x[~good])
            x, y = x[good], y[good]
        if x.size < 3 or np.ptp(x) == 0:
            continue
        res = stats.linregress(x, y)
        t = stats.t.ppf(0.975, x.size - 2)
        fits.append(LineFit(frames=int(k), points=int(x.size), slope_us_per_byte=float(res.slope),
                            slope_ci95=float(t * res.stderr), intercept_us=float(res.intercept),
                            intercept_ci95=float(t * res.intercept_stderr), r=float(res.rvalue),
                            rejected_sizes=rejected))
    return fits


def rtt_by_size(rtt_table: np.ndarray) -> dict[int, np.ndarray]:
    """Round trips (ns, -1 = timeout) per response size, from a ``latency/rtt`` table."""
    sizes = rtt_table["size_bytes"]
    return {int(s): rtt_table["rtt_ns"][sizes == s] for s in np.unique(sizes)}


#: Seed 002: an interrupt per frame gives a request-response intercept of
#: ~56-62 us on the hosts of 4.1.1 and 6.1.1; coalescing NICs give 168-230 us
#: (4.2.1, 4.3.1, 5.2.1), and RTT grows by about the added coalescence (8).
NO_COALESCENCE_INTERCEPT_US = 60.0
#: "Far above": more than this factor times the per-frame-interrupt intercept.
COALESCENCE_FACTOR = 1.5


@dataclass(frozen=True)
class InterceptVerdict:
    """What an intercept says about interrupts (seed 002 sections 4.1.1, 4.2.1, 4.3.1, 8)."""

    intercept_us: float
    intercept_ci95_us: float
    coalescence_suspected: bool
    excess_over_per_frame_us: float
    text: str


def interpret_intercept(intercept_us: float, ci95_us: float,
                        baseline_us: float = NO_COALESCENCE_INTERCEPT_US) -> InterceptVerdict:
    """Read an RTT intercept: near ``baseline_us`` an interrupt per frame, far above it interrupt coalescence."""
    excess = intercept_us - baseline_us
    suspected = intercept_us - ci95_us > COALESCENCE_FACTOR * baseline_us
    if suspected:
        text = (f"intercept {intercept_us:.1f} ± {ci95_us:.1f} us is far above the ~{baseline_us:.0f} us of an "
                f"interrupt per frame: interrupt coalescence, adding ~{excess:.0f} us per round trip "
                "(seed 002 4.2.1, 8).")
    elif intercept_us + ci95_us < COALESCENCE_FACTOR * baseline_us:
        text = (f"intercept {intercept_us:.1f} ± {ci95_us:.1f} us: no sign of interrupt coalescence; the NIC "
                "interrupts for each frame or the hosts are fast (seed 002 4.1.1, 6.1.1).")
    else:
        text = (f"intercept {intercept_us:.1f} ± {ci95_us:.1f} us: too uncertain to tell whether the NIC "
                "coalesces interrupts.")
    return InterceptVerdict(intercept_us, ci95_us, suspected, excess, text)
