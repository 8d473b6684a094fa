"""Densities of measured times: a binned Gaussian kernel estimate, the width of its peak (FWHM), and its modes.

Hughes-Jones et al. 2003 (§3.1, §6.2) describe a round-trip
histogram by the full width at half maximum of its peak (~1.5-2 us on its
hosts). Counting whole histogram bins makes that width a multiple of the bin
and biased by it; here the width is read from a kernel density estimate at
the interpolated half-maximum crossings, the kernel's own width taken out in
quadrature (exact for a Gaussian peak), with a bootstrap uncertainty.

The same density names the *modes* of a distribution: a host that flips
between two states (a ~10 us and a ~37 us round trip) gives two peaks, each
with its location and its share of the values.

Values read to a resolution (time stamps quantised to a clock) sit on a
lattice; a kernel narrower than its step would find a peak at every lattice
value. Both estimates therefore take a ``resolution``: the kernel is never
narrower than it, peaks closer than :data:`MODE_MIN_STEPS` steps are one mode,
and the width's uncertainty includes the resolution of its two edges (a
rectangular Type B component each), so values that all read the same give a
width of 0 with an honest interval rather than none.

The estimate is binned (Silverman 1982, "Algorithm AS 176"): values are
counted in bins a quarter of the bandwidth wide and the counts smoothed with
a Gaussian in the frequency domain (:mod:`scipy.fft`), so a bootstrap of the
density is a multinomial draw of the bin counts, all draws smoothed at once,
each with its own bandwidth.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from nicrig.analysis.quantity import K95, expanded, rectangular
from scipy import fft, signal, stats

#: FWHM of a Gaussian in standard deviations: 2 sqrt(2 ln 2).
FWHM_PER_SIGMA = 2.0 * math.sqrt(2.0 * math.log(2.0))
#: Bins per bandwidth: binning adds (h/4)^2/12 to the kernel's variance (0.5% of it, taken out with it).
BINS_PER_BANDWIDTH = 4
#: The grid covers the values up to this percentile (the body); the rest is the tail.
BODY_PERCENTILE = 99.5
#: Bootstrap draws of the binned counts for the width's uncertainty.
BOOTSTRAP_DRAWS = 300
#: A peak is a mode when the density above its higher valley holds at least this share of the values (its
#: excess mass: a flat background of stragglers has almost none) ...
MODE_MIN_SHARE = 0.05
#: ... and the density falls between it and each neighbour to at most this fraction of its height.
MODE_MAX_DIP = 0.5
#: Fewer values than this: no mode analysis (one mode assumed) and no width uncertainty.
MIN_VALUES = 20
#: Peaks closer than this many resolution steps are one mode: the quantisation of the values, not a state.
MODE_MIN_STEPS = 3


@dataclass(frozen=True)
class Grid:
    """Bin counts on a regular grid: ``lo + dx * (k + 0.5)`` is bin k's centre; ``h`` the kernel's bandwidth."""

    lo: float
    dx: float
    counts: np.ndarray
    h: float
    n: int

    @property
    def centres(self) -> np.ndarray:
        return self.lo + self.dx * (np.arange(self.counts.size) + 0.5)

    @property
    def kernel_sigma(self) -> float:
        """The standard deviation the estimate adds to the data's: kernel and binning together."""
        return math.sqrt(self.h ** 2 + self.dx ** 2 / 12.0)

    def density(self, counts: np.ndarray | None = None, h: float | np.ndarray | None = None) -> np.ndarray:
        """The smoothed density (per unit of the values) of ``counts`` (default: the data's), along the last axis,
        with bandwidth ``h`` (default: the grid's; an array: one per row)."""
        c = np.asarray(self.counts if counts is None else counts, dtype=np.float64)
        bw = np.asarray(self.h if h is None else h, dtype=np.float64)
        # a Gaussian kernel is a Gaussian in frequency too: one FFT smooths every row with its own bandwidth
        pad = int(math.ceil(6 * float(bw.max()) / self.dx))
        size = fft.next_fast_len(c.shape[-1] + 2 * pad, real=True)
        padded = np.zeros((*c.shape[:-1], size))
        padded[..., pad:pad + c.shape[-1]] = c
        gain = np.exp(-2 * (np.pi * fft.rfftfreq(size, d=self.dx)) ** 2 * bw[..., None] ** 2)
        smooth = fft.irfft(fft.rfft(padded, axis=-1) * gain, n=size, axis=-1)[..., pad:pad + c.shape[-1]]
        return smooth / (self.n * self.dx)


def robust_sigma(values: np.ndarray) -> float:
    """A scale that a long tail or a second mode does not inflate much: min(std, IQR / 1.349)."""
    v = np.asarray(values, dtype=np.float64)
    iqr = float(stats.iqr(v))
    sd = float(v.std(ddof=1)) if v.size > 1 else 0.0
    positive = [s for s in (sd, iqr / 1.349) if s > 0]
    return min(positive) if positive else 0.0


def silverman_bandwidth(sigma: float, n: int) -> float:
    """Silverman's rule of thumb, 0.9 sigma n^(-1/5) (Silverman 1986, eq. 3.31)."""
    return 0.9 * sigma * n ** -0.2


def grid(values: np.ndarray, h: float, lo: float | None = None, hi: float | None = None) -> Grid:
    """Bin ``values`` (finite) between ``lo`` and ``hi`` (default: the body, padded by 5 bandwidths)."""
    v = np.asarray(values, dtype=np.float64)
    lo = float(v.min()) - 5 * h if lo is None else lo
    hi = float(np.percentile(v, BODY_PERCENTILE)) + 5 * h if hi is None else hi
    dx = h / BINS_PER_BANDWIDTH
    n_bins = max(int(math.ceil((hi - lo) / dx)), 1)
    inside = v[(v >= lo) & (v < lo + n_bins * dx)]
    counts = np.bincount(((inside - lo) / dx).astype(np.int64), minlength=n_bins)[:n_bins]
    return Grid(lo, dx, counts, h, int(v.size))


def half_max_width(x: np.ndarray, f: np.ndarray) -> np.ndarray:
    """Width between the half-maximum crossings around the highest point of each row of ``f``, linearly interpolated.

    ``x`` is the regular grid of the last axis. NaN where the density does
    not fall to half its maximum on either side within the grid.
    """
    f = np.atleast_2d(f)
    k = np.arange(f.shape[-1])
    peak = np.argmax(f, axis=-1)[:, None]
    half = f.max(axis=-1, keepdims=True) / 2.0
    below = f < half
    left = np.where(below & (k < peak), k, -1).max(axis=-1)  # last bin under half before the peak
    right = np.where(below & (k > peak), k, f.shape[-1]).min(axis=-1)  # first after it
    ok = (left >= 0) & (right < f.shape[-1])
    left, right = np.clip(left, 0, f.shape[-1] - 2), np.clip(right, 1, f.shape[-1] - 1)
    rows = np.arange(f.shape[0])
    h = half[:, 0]

    def crossing(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        fa, fb = f[rows, a], f[rows, b]
        with np.errstate(invalid="ignore", divide="ignore"):
            return x[a] + (x[b] - x[a]) * (h - fa) / (fb - fa)

    width = crossing(right - 1, right) - crossing(left, left + 1)
    return np.where(ok, width, np.nan)


@dataclass(frozen=True)
class Width:
    """Full width at half maximum of a distribution's highest peak, with its 95% half-width (same unit as the data).

    ``bandwidth`` is the kernel's; ``values`` how many values it came from.
    """

    fwhm: float
    ci95: float
    bandwidth: float
    values: int


def fwhm(values: np.ndarray, *, draws: int = BOOTSTRAP_DRAWS, seed: int = 0, resolution: float = 0.0) -> Width:
    """FWHM of the highest peak of ``values``, from the kernel estimate, the kernel taken out in quadrature.

    The bandwidth follows the peak: Silverman's rule on a robust scale (never
    below ``resolution``, the step the values were read to), then again on the
    width that first estimate found, on a grid around the peak (so a far
    second mode or a long tail does not blur it). The 95% half-width combines
    the standard deviation of the width over bootstrap draws of the binned
    counts (Type A) with the resolution of its two edges (Type B, rectangular,
    :func:`nicrig.analysis.quantity.expanded`). Fewer than :data:`MIN_VALUES`
    values: NaN; a statistic that cannot be resolved is NaN, never an error.
    """
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v)]
    nan = float("nan")
    edges_u = math.sqrt(2.0) * rectangular(resolution)  # two edges, each read to the resolution
    if v.size < MIN_VALUES:
        return Width(nan, nan, nan, int(v.size))
    if np.ptp(v) <= resolution:  # every value on one or two neighbouring steps: no width is resolved
        return Width(0.0, K95 * edges_u if resolution > 0 else nan, nan, int(v.size))
    h = max(silverman_bandwidth(robust_sigma(v), v.size), resolution)
    g = grid(v, h)
    f = g.density()
    first = _deconvolved(g, half_max_width(g.centres, f)[0])
    if math.isfinite(first) and first > 0:
        # again around the peak only, with the bandwidth its own width calls for
        h = max(silverman_bandwidth(first / FWHM_PER_SIGMA, v.size), resolution)
        top = float(g.centres[np.argmax(f)])
        reach = 3 * first + 5 * h
        near = grid(v, h, top - reach, top + reach)
        # a peak far narrower than the first grid's bins (nearly every value on one level) can leave the grid
        # around it with too few values to estimate or resample: the first grid then stands
        if near.counts.sum() >= MIN_VALUES:
            g = near
    width = _deconvolved(g, half_max_width(g.centres, g.density())[0])
    unresolved = Width(width, K95 * edges_u if resolution > 0 and math.isfinite(width) else nan, g.h, int(v.size))
    inside = int(g.counts.sum())
    if draws < 2 or inside < MIN_VALUES:  # no resample to draw (the peak's grid holds too few of the values)
        return unresolved
    rng = np.random.default_rng(seed)
    counts = rng.multinomial(inside, g.counts / inside, size=draws)
    # each resample chooses its own bandwidth from its own width, as the estimate did: that choice varies too
    first = _deconvolved(g, half_max_width(g.centres, g.density(counts)))
    ok = np.isfinite(first) & (first > 0)
    if ok.sum() < 2:  # values on a few discrete levels (a simulated host): no resample has a width to take
        return unresolved
    h = np.maximum(silverman_bandwidth(first[ok] / FWHM_PER_SIGMA, v.size), resolution)
    widths = half_max_width(g.centres, g.density(counts[ok], h))
    kernel = FWHM_PER_SIGMA * np.sqrt(h ** 2 + g.dx ** 2 / 12.0)
    boot = np.sqrt(np.maximum(widths ** 2 - kernel ** 2, 0.0))
    boot = boot[np.isfinite(boot)]
    if boot.size < 2:
        return unresolved
    # the estimate's own bias (noise lifts the peak and narrows the width) shows again in the resamples
    return Width(max(2 * width - float(boot.mean()), 0.0), expanded(float(boot.std(ddof=1)), math.inf, edges_u),
                 g.h, int(v.size))


def _deconvolved(g: Grid, width: float | np.ndarray) -> float | np.ndarray:
    """A width of the estimate less the kernel's, in quadrature (exact for a Gaussian peak)."""
    kernel = FWHM_PER_SIGMA * g.kernel_sigma
    w = np.sqrt(np.maximum(np.square(width) - kernel ** 2, 0.0))
    return float(w) if np.ndim(w) == 0 else w


@dataclass(frozen=True)
class Mode:
    """One peak of a distribution: where it is, the values between its valleys, and their share of all values."""

    location: float
    lower: float
    upper: float
    count: int
    share: float


def modes(values: np.ndarray, bandwidth: float | None = None, resolution: float = 0.0) -> list[Mode]:
    """The modes of ``values``, lowest first: peaks of the kernel estimate whose excess mass (the density above
    their higher valley) is at least 5% of the values, from which the density falls to at most half their
    height before the next peak on either side, and which lie at least :data:`MODE_MIN_STEPS` times
    ``resolution`` (the step the values were read to) from their neighbours.

    Weaker peaks are merged into their neighbours one at a time (the weakest
    first), so noise in a long tail is never a mode. Each mode spans from the
    valley below it to the valley above it (the first from -inf, the last to
    +inf); ``location`` is its peak, interpolated by a parabola through the
    highest bin and its neighbours. ``bandwidth`` defaults to Silverman's rule
    on the values' robust scale, and is never narrower than ``resolution``.
    Fewer than :data:`MIN_VALUES` values: one mode.
    """
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v)]
    if v.size == 0:
        return []
    if v.size < MIN_VALUES or np.ptp(v) <= MODE_MIN_STEPS * resolution:
        return [Mode(float(np.median(v)), -math.inf, math.inf, int(v.size), 1.0)]
    h = max(bandwidth if bandwidth else silverman_bandwidth(robust_sigma(v), v.size), resolution)
    g = grid(v, h)
    f = g.density()
    x = g.centres
    unit = 2 * math.sqrt(math.pi) * v.size * h  # Var f = f / unit
    peaks = signal.find_peaks(np.concatenate(([0.0], f, [0.0])))[0] - 1
    # a peak that could not stand 3 standard errors above zero never becomes a mode: drop those at once
    peaks = list(peaks[f[peaks] >= 9 / unit]) or [int(np.argmax(f))]
    while True:
        valleys = [int(a + np.argmin(f[a:b + 1])) for a, b in zip(peaks, peaks[1:])]
        bounds = [0, *valleys, f.size - 1]
        # each peak's higher valley, how deep that is against its height, and the mass above that level
        levels = [max(f[valleys[i - 1]] if i > 0 else 0.0, f[valleys[i]] if i < len(valleys) else 0.0)
                  for i in range(len(peaks))]
        dips = [level / f[p] for level, p in zip(levels, peaks)]
        excess = [float(np.clip(f[a:b + 1] - level, 0, None).sum() * g.dx)
                  for a, b, level in zip(bounds, bounds[1:], levels)]
        # a peak must stand above its valley by 3 standard errors of the estimate (Var f = f / (2 sqrt(pi) n h))
        noise = [3 * math.sqrt((f[p] + level) / unit) for p, level in zip(peaks, levels)]
        # a peak within a few resolution steps of a higher neighbour is that neighbour's quantisation, not a state
        near = [any(abs(x[peaks[j]] - x[peaks[i]]) < MODE_MIN_STEPS * resolution and f[peaks[j]] >= f[peaks[i]]
                    for j in _neighbours(i, len(peaks))) for i in range(len(peaks))]
        weak = [i for i in range(len(peaks)) if near[i] or excess[i] < MODE_MIN_SHARE or dips[i] > MODE_MAX_DIP
                or f[peaks[i]] - levels[i] < noise[i]]
        if not weak or len(peaks) == 1:
            break
        worst = max(weak, key=lambda i: (near[i], dips[i] > MODE_MAX_DIP, dips[i], -excess[i]))
        peaks.pop(worst)
    edges = [-math.inf, *(float(x[k]) for k in valleys), math.inf]
    counts = np.histogram(v, edges)[0]
    return [Mode(_vertex(x, f, p), lo, hi, int(c), int(c) / v.size)
            for p, lo, hi, c in zip(peaks, edges, edges[1:], counts)]


def _neighbours(i: int, n: int) -> list[int]:
    """The indices beside ``i`` among ``n``."""
    return [j for j in (i - 1, i + 1) if 0 <= j < n]


def _vertex(x: np.ndarray, f: np.ndarray, k: int) -> float:
    """The top of the parabola through bins k-1, k, k+1 (k itself at the grid's edges)."""
    if k <= 0 or k >= f.size - 1:
        return float(x[k])
    a, b, c = f[k - 1], f[k], f[k + 1]
    denom = a - 2 * b + c
    shift = 0.5 * (a - c) / denom if denom != 0 else 0.0
    return float(x[k] + shift * (x[1] - x[0]))
