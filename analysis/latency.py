"""Request-response latency: the one estimator of RTT against response size, and what it supports saying.

Hughes-Jones et al. 2003, §3.1: the round-trip time plotted against the
response size is a line whose slope (us/byte) is the sum of the inverse
transfer rates of the path's store-and-forward elements, and whose intercept
(us) is the sum of fixed latencies and per-packet processing. A response
longer than one MTU needs further frames, which adds a step (their figure
4.1): the fit is made separately for each number of frames per response.

:func:`estimate` is the only place these numbers are computed: ``nicrig
udpmon latency`` (its summary and the ``latency/*`` tables it stores), ``nicrig
report`` and the GUI all call it on the singletons of ``latency/rtt``. It

* reduces each *visit* (the round trips of one size in one round) to one
  value: its minimum, its mean and, when the host has several states, the
  median of its round trips in the main state (:mod:`nicrig.analysis.rounds`
  fits lines through those values round by round and takes the spread of the
  rounds' lines as the uncertainty, which holds under drift and host states);
* names the modes of the RTT distribution (host states) from each round
  trip's excess over its size's low percentile
  (:func:`nicrig.analysis.density.modes`), and says which statistic the
  readings use and why;
* gives each size's statistics, its FWHM with an uncertainty
  (:func:`nicrig.analysis.density.fwhm`), and flags suspect sizes (left out of
  the line, listed, never silently dropped);
* takes the resolution of the round trips' time stamps (``step_ns``: 1 ns in
  a results file, the bus clock of a simulated rig) into every interval, the
  modes and the flags, so that quantised or noiseless round trips give one
  mode, no suspect sizes and finite intervals that cover the truth.

:func:`readings` turns an estimate into sentences, and prints a physical
reading only where the data resolve it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from nicrig.analysis import density, rounds
from nicrig.analysis.citations import HUGHES_JONES as HJ2003
from nicrig.analysis.hostprobe import quantile_us
from nicrig.analysis.quantity import expanded, interval, number, rectangular
from nicrig.analysis.sentence import Quotes, Sentence
from nicrig.analysis.throughput import frames_per_message

PERCENTILES = (1, 5, 10, 25, 75, 90, 95, 99)
#: The report's tables of a latency run, which the sentences below quote: titles and the columns quoted.
STATS_TABLE = "RTT per response size"
MODES_TABLE = "Modes of the round trips (host states)"
MODE_LOCATION, MODE_SHARE = "RTT at the smallest size (us)", "share (%)"
FITS_TABLE = "RTT = intercept + slope x size, per statistic and frame count"
FIT_COLUMNS = ["fitted on", "frames", "sizes", "rounds", "slope (us/byte)", "slope ± 95% (us/byte)",
               "intercept (us)", "intercept ± 95% (us)", "r", "R²", "lack of fit p", "suspect sizes left out"]
SLOPE, SLOPE_U, INTERCEPT, INTERCEPT_U, R_SQUARED = (FIT_COLUMNS[4], FIT_COLUMNS[5], FIT_COLUMNS[6], FIT_COLUMNS[7],
                                                     FIT_COLUMNS[9])
#: The report's item stating the resolution (ns) of the round trips' time stamps.
RESOLUTION_ITEM = "resolution of the round trips' time stamps"
#: How the tables name each statistic a visit is reduced to.
STAT_LABEL = {"minimum": "minimum", "mean": "mean", "main mode": "main-mode median"}
#: Terms the report defines where it first uses them.
VISIT = ("visit (one response size in one round: the round trips measured at that size before the run moves on "
         "to the next)")
#: Round trips in a results file are whole nanoseconds.
RESULTS_STEP_NS = 1.0
#: The percentile of each size's round trips the modes are measured from.
BASELINE_PERCENTILE = 10


@dataclass(frozen=True)
class RttStats:
    """Statistics of one response size's round trips over all rounds, in microseconds (timeouts excluded, counted).

    ``fwhm_us`` is the full width at half maximum of the distribution's
    highest peak, ``fwhm_ci95_us`` its 95% half-width (:func:`density.fwhm`).
    ``median_ci95_us`` and ``p99_ci95_us`` are the distribution-free 95%
    half-widths of those quantiles (:func:`nicrig.analysis.hostprobe.quantile_us`;
    NaN where too few round trips bound the quantile), ``mean_ci95_us`` the
    mean's (Student t on the round trips' spread); all three include the time
    stamps' resolution as a Type B component (GUM §F.2.2.1). The minimum and
    maximum are observed values, known to that resolution alone.
    """

    count: int
    timeouts: int
    min_us: float
    mean_us: float
    median_us: float
    max_us: float
    std_us: float
    percentiles_us: dict[int, float]
    fwhm_us: float
    fwhm_ci95_us: float
    median_ci95_us: float
    mean_ci95_us: float
    p99_ci95_us: float


def histogram(rtt_us: np.ndarray, bin_us: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """Histogram of round-trip times: (left bin edges in us, counts), bins ``bin_us`` wide from the minimum."""
    rtt_us = np.asarray(rtt_us, dtype=np.float64)
    if rtt_us.size == 0:
        return np.zeros(0), np.zeros(0, dtype=np.int64)
    lo = math.floor(rtt_us.min() / bin_us) * bin_us
    n = int(math.floor((rtt_us.max() - lo) / bin_us)) + 1
    counts = np.bincount(np.floor((rtt_us - lo) / bin_us).astype(np.int64), minlength=n)
    return lo + bin_us * np.arange(n), counts


#: Bins across the bulk of the round trips (minimum to 95th percentile) below which a histogram shows no shape.
HISTOGRAM_MIN_BINS = 10
#: Bins a finer drawing bin puts across that bulk.
HISTOGRAM_BINS = 30


def drawing_bin_us(rtt_us: list[np.ndarray], bin_us: float, step_us: float) -> float:
    """The bin (us) to draw round trips in: the run's ``bin_us`` (UDPmon's histogram bin, 1 us by default), unless
    the bulk of each size's round trips (minimum to 95th percentile) spans fewer than ``HISTOGRAM_MIN_BINS`` of
    them (a quiet host, a simulated rig: the peak in one bar); then a 1-2-5 step giving about ``HISTOGRAM_BINS``
    across the widest bulk, never finer than the time stamps' resolution ``step_us`` (finer bins would draw the
    clock's lattice as a comb)."""
    bulk = max((float(np.percentile(v, 95) - v.min()) for v in rtt_us if np.size(v)), default=0.0)
    if bulk >= HISTOGRAM_MIN_BINS * bin_us:
        return bin_us
    want = max(bulk / HISTOGRAM_BINS, step_us, 1e-3)
    decade = 10.0 ** math.floor(math.log10(want))
    nice = next(m * decade for m in (1, 2, 5, 10) if m * decade >= want * (1 - 1e-9))
    return min(nice, bin_us)


def histogram_sizes(sizes: list[int], most: int = 4) -> list[int]:
    """The sizes the histograms figure shows: all of up to ``most``, else ``most`` spread evenly from the smallest to
    the largest (as Hughes-Jones et al. 2003, figure 6.4 shows 64, 512, 1024 and 1400 bytes)."""
    if len(sizes) <= most:
        return list(sizes)
    return [sizes[i] for i in np.linspace(0, len(sizes) - 1, most).round().astype(int)]


def rtt_stats(rtt_ns: np.ndarray, step_ns: float = RESULTS_STEP_NS) -> RttStats:
    """Statistics of round trips given in ns, read to ``step_ns``; negative entries are timeouts."""
    rtt_ns = np.asarray(rtt_ns)
    ok_ns = rtt_ns[rtt_ns >= 0]
    ok = ok_ns / 1000.0
    if ok.size == 0:
        nan = float("nan")
        return RttStats(0, int(rtt_ns.size), nan, nan, nan, nan, nan, {p: nan for p in PERCENTILES}, nan, nan,
                        nan, nan, nan)
    width = density.fwhm(ok, resolution=step_ns / 1000)
    std = float(ok.std(ddof=1)) if ok.size > 1 else 0.0
    return RttStats(
        count=int(ok.size), timeouts=int(rtt_ns.size - ok.size),
        min_us=float(ok.min()), mean_us=float(ok.mean()), median_us=float(np.median(ok)), max_us=float(ok.max()),
        std_us=std,
        percentiles_us={p: float(v) for p, v in zip(PERCENTILES, np.percentile(ok, PERCENTILES))},
        fwhm_us=width.fwhm, fwhm_ci95_us=width.ci95,
        median_ci95_us=quantile_us(ok_ns, 0.5, step_ns)[1],
        mean_ci95_us=expanded(std / math.sqrt(ok.size), ok.size - 1, rectangular(step_ns / 1000)),
        p99_ci95_us=quantile_us(ok_ns, 0.99, step_ns)[1],
    )


def rtt_by_size(rtt_table: np.ndarray) -> dict[int, np.ndarray]:
    """Round trips (ns, -1 = timeout) per response size, from a ``latency/rtt`` table."""
    sizes = rtt_table["size_bytes"]
    return {int(s): rtt_table["rtt_ns"][sizes == s] for s in np.unique(sizes)}


@dataclass(frozen=True)
class LineFit:
    """RTT = intercept + slope x size, on one statistic of the visits, over the sizes needing ``frames`` frames.

    Half-widths are 95%. ``points``: sizes fitted; ``rounds``: rounds that gave
    a line (the interval's degrees of freedom are ``rounds - 1``; one round:
    least squares over the sizes, ``points - 2``). ``r``: correlation of the
    per-size values with size; ``r_squared``: the share of their variance the
    line explains; ``lack_of_fit_p``: F test of the sizes' mean deviations
    against their round-to-round scatter. ``suspect_sizes``: flagged by
    :mod:`nicrig.analysis.rounds`' rule and left out of the line.
    ``slope_resolution_u``, ``intercept_resolution_u``: the standard
    uncertainty the time stamps' resolution gives each (Type B, part of the
    half-widths).
    """

    statistic: str
    frames: int
    points: int
    rounds: int
    slope_us_per_byte: float
    slope_ci95: float
    intercept_us: float
    intercept_ci95: float
    r: float
    r_squared: float
    lack_of_fit_p: float
    suspect_sizes: tuple[int, ...] = ()
    slope_resolution_u: float = 0.0
    intercept_resolution_u: float = 0.0

    @property
    def explains(self) -> bool:
        """The line accounts for at least :data:`rounds.MIN_R_SQUARED` of the per-size values' variance."""
        return bool(self.r_squared >= rounds.MIN_R_SQUARED)

    @property
    def slope_resolved(self) -> bool:
        """The slope is positive and its 95% interval excludes zero."""
        return bool(self.slope_us_per_byte - self.slope_ci95 > 0)


@dataclass(frozen=True)
class RttMode:
    """A mode of the round trips (a host state): RTT at the smallest size, its offset above the fastest mode's,
    and how many of the round trips it holds (``main``: the largest share)."""

    location_us: float
    offset_us: float
    count: int
    share: float
    main: bool


@dataclass(frozen=True)
class LatencyEstimate:
    """Everything :func:`estimate` finds in one latency run.

    Per size (arrays in ``sizes`` order): ``frames``, ``stats`` (all round
    trips), and per statistic the value the lines go through (``values``:
    mean over rounds of the visits' statistic) with its 95% half-width
    (``values_ci95``, from the spread over the rounds) and whether the size
    was flagged (``suspect``). ``fits`` per statistic, one per frame count
    with at least three sizes. ``statistic`` is the one the readings use,
    ``reason`` why; ``order`` how the visits were ordered (``random``,
    ``ascending``) and ``rounds`` how many rounds there were; ``visits`` per
    size, the rounds in which it got at least one response. ``step_us``: the
    resolution of the round trips' time stamps; ``values_resolution_u`` the
    part of its quantisation error each value carries that the round trips'
    noise does not average away (Type B, in ``values_ci95``).
    """

    sizes: np.ndarray
    frames: np.ndarray
    visits: np.ndarray
    stats: dict[int, RttStats]
    rounds: int
    order: str
    values: dict[str, np.ndarray]
    values_ci95: dict[str, np.ndarray]
    values_resolution_u: dict[str, np.ndarray]
    suspect: dict[str, np.ndarray]
    fits: dict[str, list[LineFit]]
    modes: list[RttMode]
    statistic: str
    reason: str
    round_trips: int = 0
    timeouts: int = 0
    step_us: float = RESULTS_STEP_NS / 1000

    def fit(self, statistic: str | None = None, frames: int = 1) -> LineFit | None:
        """The fit on ``statistic`` (default: the readings') for ``frames`` frames, None when there is none."""
        return next((f for f in self.fits.get(statistic or self.statistic, []) if f.frames == frames), None)

    @property
    def interval_method(self) -> str:
        """How the 95% intervals were made, in words."""
        if self.rounds >= 2:
            return (f"spread of the {self.rounds} rounds' own lines (Student t, {self.rounds - 1} degrees of "
                    "freedom): holds under drift and host states")
        return "least squares over the sizes of the one round: assumes the sizes independent, which drift breaks"


def _columns(table: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, str]:
    """(size, round, rtt in us with NaN for timeouts, order) of a ``latency/rtt`` table.

    A table without a ``round`` column (results format 2) was measured in one
    ascending sweep, UDPmon's order.
    """
    size = table["size_bytes"].astype(np.int64)
    names = table.dtype.names
    rnd = table["round"].astype(np.int64) if "round" in names else np.zeros(size.size, np.int64)
    rtt = np.where(table["rtt_ns"] >= 0, table["rtt_ns"] / 1000.0, np.nan)
    if "position" not in names:
        return size, rnd, rtt, "ascending"
    sizes, idx = np.unique(size, return_inverse=True)
    ascending = np.array_equal(np.asarray(table["position"]), idx) if sizes.size else True
    return size, rnd, rtt, "ascending" if ascending else "random"


def residuals(sizes: np.ndarray, size_index: np.ndarray, rtt_us: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each round trip less its size's :data:`BASELINE_PERCENTILE`-th percentile, and those percentiles.

    Host states show as the round trips of one size spreading into several
    levels over the rounds; taking each size's own level out first keeps
    sizes that lie off a straight line (a step, a cache effect) from looking
    like states.
    """
    base = rounds.group_statistic(rtt_us, size_index, sizes.size, BASELINE_PERCENTILE / 100)
    return rtt_us - base[size_index], base


@dataclass(frozen=True)
class HostStates:
    """The modes of the round trips, the statistic the readings use and why, and (main mode) the residual window
    of the main mode's round trips: from the valley below it to the valley above it (the highest mode: as far
    above its peak as its valley is below, so the long tail of stragglers stays out)."""

    modes: list[RttMode]
    statistic: str
    reason: Sentence
    window: tuple[float, float] | None


def host_states(resid_us: np.ndarray, base_us: float, step_us: float = RESULTS_STEP_NS / 1000) -> HostStates:
    """Find the modes of the residuals (:func:`residuals`), read to ``step_us``, and choose the statistic: the
    minimum of each visit for one mode, the median of its round trips in the main mode (the largest share) for
    several."""
    found = density.modes(resid_us, resolution=step_us)
    if not found:
        return HostStates([], "minimum", Sentence("no round trip came back"), None)
    main = max(range(len(found)), key=lambda i: found[i].count)
    first = found[0].location
    modes = [RttMode(location_us=float(base_us + m.location), offset_us=float(m.location - first), count=m.count,
                     share=m.share, main=i == main) for i, m in enumerate(found)]
    if len(found) == 1:
        return HostStates(modes, "minimum", Sentence(
            "the round trips have one mode, and each visit's minimum is the round trip least disturbed by other "
            f"activity on the hosts ({HJ2003}, §3.1)"), None)
    m = found[main]
    # the highest mode runs to +inf in counting; as a window it stops as far above its peak as its valley is below
    upper = m.upper if math.isfinite(m.upper) else 2 * m.location - m.lower
    q = Quotes()
    return HostStates(modes, "main mode", q.sentence(
        f"the round trips have {len(found)} modes (host states, peaks of their density separated by a valley); the "
        "minimum and the mean of a visit mix them, so each visit is reduced to the median of its round trips in "
        f"the main mode (the mode holding the most round trips, here "
        f"{q(MODES_TABLE, MODE_SHARE, number(100 * m.share, decimals=0))}%)", defines=["main mode"]),
        (m.lower, upper))


def _reading_noise(rtt_us: np.ndarray, visit: np.ndarray, n_visits: int, step_us: float) -> float:
    """The round trips' standard deviation within a visit (the median over the visits of their variances, less
    the quantiser's step^2 / 12 as Sheppard corrects it): what dithers the quantiser under a visit's mean."""
    var = rounds.group_statistic(rtt_us, visit, n_visits, "variance")
    if not np.isfinite(var).any():
        return 0.0
    return math.sqrt(max(float(np.nanmedian(var)) - step_us ** 2 / 12, 0.0))


def estimate(table: np.ndarray, mtu: int = 1500, *, step_ns: float = RESULTS_STEP_NS) -> LatencyEstimate:
    """The one latency estimator: statistics, modes, per-round lines and flags of a ``latency/rtt`` table whose
    round trips were read to ``step_ns`` (:func:`nicrig.analysis.resolution.results_step`)."""
    step_us = step_ns / 1000
    size, rnd, rtt, order = _columns(table)
    sizes, s_idx = np.unique(size, return_inverse=True)
    round_ids, r_idx = np.unique(rnd, return_inverse=True)
    n_s, n_r = sizes.size, max(round_ids.size, 1)
    frames = np.array([frames_per_message(int(s), mtu) for s in sizes], dtype=np.int64)
    per_size = {int(s): table["rtt_ns"][s_idx == k] for k, s in enumerate(sizes)}
    size_stats = {s: rtt_stats(v, step_ns) for s, v in per_size.items()}
    visit = r_idx * n_s + s_idx
    ys = {stat: rounds.group_statistic(rtt, visit, n_r * n_s, stat).reshape(n_r, n_s)
          for stat in ("minimum", "mean")}
    resid, base = residuals(sizes, s_idx, rtt)
    states = host_states(resid, float(base[0]) if base.size else 0.0, step_us)  # empty table: no round trip, no mode
    # the round trips a visit's mean (or main-mode median) is made from dither the quantiser; its minimum is
    # dithered by the minima's own scatter from round to round, which rounds.fit measures itself
    noise = {"minimum": None, "mean": _reading_noise(rtt, visit, n_r * n_s, step_us)}
    if states.window is not None:
        lo, hi = states.window
        inside = np.where((resid >= lo) & (resid < hi), rtt, np.nan)
        ys["main mode"] = rounds.group_statistic(inside, visit, n_r * n_s, "median").reshape(n_r, n_s)
        noise["main mode"] = _reading_noise(inside, visit, n_r * n_s, step_us)
    values, values_ci, values_ub, suspect, fits = {}, {}, {}, {}, {}
    for stat, y in ys.items():
        values[stat] = np.full(n_s, np.nan)
        values_ci[stat] = np.full(n_s, np.nan)
        values_ub[stat] = np.full(n_s, np.nan)
        suspect[stat] = np.zeros(n_s, dtype=bool)
        fits[stat] = []
        for k in np.unique(frames):
            cols = np.flatnonzero(frames == k)
            lines = rounds.fit(sizes[cols].astype(np.float64), y[:, cols], step=step_us, noise=noise[stat])
            values[stat][cols], values_ci[stat][cols] = lines.value, lines.value_ci95
            values_ub[stat][cols] = lines.resolution_u["value"]
            suspect[stat][cols] = lines.suspect
            if int(lines.used.sum()) >= 3 and np.isfinite(lines.slope):
                fits[stat].append(LineFit(
                    statistic=stat, frames=int(k), points=int(lines.used.sum()), rounds=int(lines.rounds),
                    slope_us_per_byte=float(lines.slope), slope_ci95=float(lines.slope_ci95),
                    intercept_us=float(lines.intercept), intercept_ci95=float(lines.intercept_ci95),
                    r=float(lines.r), r_squared=float(lines.r_squared), lack_of_fit_p=float(lines.lack_of_fit_p),
                    suspect_sizes=tuple(int(s) for s in sizes[cols][lines.suspect]),
                    slope_resolution_u=float(lines.resolution_u["slope"]),
                    intercept_resolution_u=float(lines.resolution_u["intercept"])))
    return LatencyEstimate(
        sizes=sizes, frames=frames, visits=np.isfinite(ys["minimum"]).sum(axis=0), stats=size_stats,
        rounds=int(round_ids.size), order=order, values=values,
        values_ci95=values_ci, values_resolution_u=values_ub, suspect=suspect, fits=fits, modes=states.modes,
        statistic=states.statistic,
        reason=states.reason,
        round_trips=int(np.isfinite(rtt).sum()), timeouts=int((~np.isfinite(rtt)).sum()), step_us=step_us)


#: Hughes-Jones et al. 2003: an interrupt per frame gives a request-response intercept of ~56-62 us on the hosts
#: of §4.1.1 and §6.1.1; coalescing NICs give 168-230 us (§4.2.1, §4.3.1, §5.2.1), and RTT grows by about the
#: added coalescence (§8).
NO_COALESCENCE_INTERCEPT_US = 60.0
#: "Far above": more than this factor times the per-frame-interrupt intercept.
COALESCENCE_FACTOR = 1.5


#: The sentence that defines the fits tables' "lack of fit p" column for the reader.
LACK_OF_FIT_DEFINED = Sentence(
    "Lack of fit p: the probability that the sizes' mean distances from a straight line would be as large "
    "as these if RTT were a straight line in size, from their round-to-round scatter and the resolution "
    "(an F test); a small p (under 0.05) says the line misses real structure, such as a step.",
    given=["0.05"], defines=["lack of fit p"])


def lack_of_fit_said(p: list[float]) -> list[Sentence]:
    """What a report says of the fits tables' "lack of fit p" column, whose values are ``p``: always what it is
    (the column is always there), and why it is blank when no fit has one (the F test needs three sizes or more,
    one of them seen in two rounds)."""
    if any(np.isfinite(p)):
        return [LACK_OF_FIT_DEFINED]
    return [LACK_OF_FIT_DEFINED, Sentence("Lack of fit p is blank here: the test needs three sizes or more, one of "
                                          "them seen in two rounds.")]


@dataclass(frozen=True)
class InterceptVerdict:
    """What an intercept says about interrupts (Hughes-Jones et al. 2003, §4.1.1, §4.2.1, §4.3.1, §8)."""

    intercept_us: float
    intercept_ci95_us: float
    coalescence_suspected: bool
    excess_over_per_frame_us: float
    text: Sentence


def interpret_intercept(intercept_us: float, ci95_us: float,
                        baseline_us: float = NO_COALESCENCE_INTERCEPT_US, row: str = "") -> InterceptVerdict:
    """Read an RTT intercept: near ``baseline_us`` an interrupt per frame, far above it interrupt coalescence.
    ``row``: the fits table's row it is quoted from (its "fitted on" cell)."""
    excess = intercept_us - baseline_us
    suspected = intercept_us - ci95_us > COALESCENCE_FACTOR * baseline_us
    q = Quotes()
    said = q.measured(FITS_TABLE, INTERCEPT, INTERCEPT_U, intercept_us, ci95_us, "us", row)
    base = f"{number(baseline_us, decimals=0)} us"
    if suspected:
        more = f"{number(excess, decimals=0)} us"  # no finer than the rough per-frame figure it is taken from
        text = q.sentence(f"The intercept, {said}, is far above the ~{base} of an interrupt per frame: interrupt "
                          f"coalescence, adding ~{more} per round trip ({HJ2003}, §4.2.1, §8).", given=[base, more])
    elif intercept_us + ci95_us < COALESCENCE_FACTOR * baseline_us:
        text = q.sentence(f"The intercept, {said}, shows no interrupt coalescence: the NIC interrupts for each frame, "
                          f"or the hosts are fast ({HJ2003}, §4.1.1, §6.1.1).")
    else:
        text = q.sentence(f"The intercept, {said}, is too uncertain to tell whether the NIC coalesces interrupts.")
    return InterceptVerdict(intercept_us, ci95_us, suspected, excess, text)


def unresolved(fit: LineFit | None, est: LatencyEstimate, table: str = FITS_TABLE, row: str = "") -> Sentence | None:
    """Why ``fit`` supports no physical reading (None: it does), quoting the fits table ``table`` (in the row whose
    first cell is ``row``, by default the fit's statistic).

    A line needs three single-frame sizes, interleaved rounds, a resolved slope and a fit that explains the data.
    """
    if fit is None:
        return Sentence("fewer than three single-frame sizes were measured, so there is no line to read")
    if est.rounds < 2:
        return Sentence(f"the sizes were measured in one {est.order} sweep, so drift of the hosts during the sweep "
                        "cannot be told from slope (measure in rounds, the default of 'nicrig udpmon latency')")
    q = Quotes()
    row = row or STAT_LABEL[fit.statistic]
    if not fit.slope_resolved:
        slope = q.measured(table, SLOPE, SLOPE_U, fit.slope_us_per_byte, fit.slope_ci95, "us/byte", row)
        where = ("its 95% interval " + interval(fit.slope_us_per_byte, fit.slope_ci95) + " includes zero"
                 if fit.slope_us_per_byte + fit.slope_ci95 >= 0 else "it is negative, which no path can be")
        # this may be the first the report says of the main mode (a sweep's step), so the sentence defines it
        on = (f"the {fit.statistic} (the mode holding the most round trips)" if fit.statistic == "main mode"
              else f"the {fit.statistic}")
        return q.sentence(f"the slope on {on}, {slope}, is not resolved: {where}",
                          defines=["main mode"] if fit.statistic == "main mode" else ())
    if not fit.explains:
        r2 = (f"R² {q(table, R_SQUARED, number(fit.r_squared, decimals=3), row)}" if fit.r_squared >= 0
              else "R² below zero: it fits them worse than their mean")
        return q.sentence(f"the line explains too little of the variance of the per-size {fit.statistic} values "
                          f"({r2}; the criterion is R² ≥ {rounds.MIN_R_SQUARED:g}): RTT does not follow a "
                          "straight line in size closely enough to read its slope and intercept",
                          given=[f"{rounds.MIN_R_SQUARED:g}"])
    return None


def readings(est: LatencyEstimate, *, loopback: bool, expected_slope_us_per_byte: float | None = None,
             path: str = "") -> list[Sentence]:
    """The sentences a latency run supports, every number in them one the tables show (quoted with the cell it
    comes from).

    The fits' statistic and why (defining a visit and, with several modes,
    the main mode); the host states; suspect sizes; what "lack of fit p"
    means; then, on the single-frame fit of the readings' statistic, a
    physical reading only when :func:`unresolved` finds nothing against it,
    otherwise what could not be resolved and why.
    """
    q = Quotes()
    reason = est.reason
    step = q("", RESOLUTION_ITEM, number(1000 * est.step_us, decimals=0))
    out = [Sentence(f"Lines are fitted through the {est.statistic} of each {VISIT}: {reason}. "
                    f"95% intervals: {est.interval_method}; they include the resolution of the round trips' time "
                    f"stamps, {step} ns, as a rectangular Type B component.",
                    [*reason.cites, *q.sentence("").cites], given=reason.given, defines=["visit", *reason.defines])]
    if len(est.modes) > 1:
        smallest = int(est.sizes[0])
        states = "; ".join(f"{q(MODES_TABLE, MODE_LOCATION, number(m.location_us, decimals=1))} us "
                           f"({q(MODES_TABLE, MODE_SHARE, number(100 * m.share, decimals=0))}% of the round trips"
                           f"{', the main mode' if m.main else ''})" for m in est.modes)
        out.append(q.sentence(f"The round trips fall into {len(est.modes)} modes, states of the hosts, here at "
                              f"{smallest}-byte responses: {states}."))
    for stat, fits in est.fits.items():
        flagged = [s for f in fits for s in f.suspect_sizes]
        if flagged:
            one = len(flagged) == 1
            out.append(Sentence(
                f"{'Size' if one else 'Sizes'} {', '.join(map(str, flagged))} bytes {'lies' if one else 'lie'} off "
                f"the line on the {stat}: {'its' if one else 'their'} mean residual over the rounds is more than "
                f"one resolution step and beyond the {100 * rounds.FLAG_ALPHA:g}% Bonferroni bound; "
                f"{'it is' if one else 'they are'} flagged in the tables and left out of that line.",
                given=[f"{100 * rounds.FLAG_ALPHA:g}%"]))
    out += lack_of_fit_said([f.lack_of_fit_p for fl in est.fits.values() for f in fl])
    fit = est.fit(frames=1)
    why = unresolved(fit, est)
    if why is not None:
        out.append(Sentence(f"No physical reading of the slope or intercept: {why}.", why.cites))
        if expected_slope_us_per_byte is not None:
            out.append(Sentence(f"The path {path} would give {number(expected_slope_us_per_byte)} us/byte; with the "
                                "slope not resolved the two are not compared.",
                                given=[f"{number(expected_slope_us_per_byte)} us/byte"]))
        return out
    row = STAT_LABEL[fit.statistic]
    if loopback:
        slope = q.measured(FITS_TABLE, SLOPE, SLOPE_U, fit.slope_us_per_byte, fit.slope_ci95, "us/byte", row)
        intercept = q.measured(FITS_TABLE, INTERCEPT, INTERCEPT_U, fit.intercept_us, fit.intercept_ci95, "us", row)
        out.append(q.sentence(f"Over loopback no NIC, bus or wire lies on the path: the slope, {slope}, is the cost "
                              f"of moving the data through the two stacks, and the intercept, {intercept}, their "
                              "cost per message."))
    else:
        out.append(interpret_intercept(fit.intercept_us, fit.intercept_ci95, row=row).text)
    if expected_slope_us_per_byte is not None:
        from nicrig.analysis import expected

        verdict = expected.interpret_slope(fit.slope_us_per_byte, fit.slope_ci95, expected_slope_us_per_byte,
                                           quote=(FITS_TABLE, row))
        out.append(Sentence(verdict.text + f" (path: {path})", verdict.text.cites, given=verdict.text.given))
    return out
