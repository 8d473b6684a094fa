"""Straight lines through values measured in interleaved rounds, with intervals that hold under drift.

A run visits every x (a response size) once per *round*, in a fresh random
order each round. Each round then gives a line of its own; host drift and
host states shift a round's points by amounts unrelated to x (the order is
random), so the rounds' slopes scatter about the true slope, independently
from round to round. The estimate is the mean of the rounds' slopes and its
95% interval Student's t over their spread (batch means: the rounds are the
batches). No assumption that the points of one round are independent of each
other is needed, which is exactly what drift breaks; ``tests/
test_latency_estimator.py`` checks the coverage on clean Gaussian noise, a
random-walk drift and two switching host states.

Suspect x (a size on which the line does not pass) are found by one rule
whatever the number of rounds: a studentized residual beyond the Bonferroni
bound of a 0.1% family-wise test for Gaussian residuals (per-visit minima
are skewed, which fattens one tail: on clean data the rule still flags a good
size in under 1% of fits, the tests check it), removed one at a time, largest first, then the rest refitted.
At most a fifth of the sizes are flagged: more points off the line are not
exceptions but a curve, which the line's R² reports. With rounds, a size's
mean residual is studentized by the round-to-round
scatter of all sizes' residuals; with one round (UDPmon's legacy sweep) by the scatter about the line
(externally studentized residuals, Cook and Weisberg 1982, §2.2).

Time stamps quantised to a ``step`` (a results file's 1 ns, a simulated
bus's clock) bound what the data resolve: each per-x value carries the part
of the step's quantisation error that the values' own noise does not average
away (:func:`nicrig.analysis.quantity.quantisation_u`: step / sqrt(12) for
noiseless values, nothing once the round-to-round scatter dithers the step)
as a Type B component, propagated to the slope and intercept through the
least-squares weights and combined with the rounds' spread
(:func:`nicrig.analysis.quantity.expanded`); a point whose mean residual is
within one step of the line is never suspect, and the lack-of-fit test counts
the quantisation as expected scatter, not as lack of fit. A noiseless run so
gets finite intervals that cover the truth and no flags; a noisy one the
intervals its scatter gives.

Every function works on a batch: arrays with leading dimensions are many
independent runs at once (the statistical tests use thousands).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from nicrig.analysis.quantity import expanded, quantisation_u, type_a
from scipy import stats

#: Family-wise probability that a clean fit with Gaussian residuals flags a good point.
FLAG_ALPHA = 0.001
#: At most this share of the points is flagged: beyond it the data do not follow a line with a few exceptions,
#: and the line's lack of fit (its R²) says so, not the flags.
MAX_SUSPECT_SHARE = 0.2
#: The line explains the data when it accounts for at least this share of the variance of the per-x values.
MIN_R_SQUARED = 0.9


def group_statistic(values: np.ndarray, groups: np.ndarray, n_groups: int, statistic: str | float) -> np.ndarray:
    """``minimum``, ``mean``, ``median``, ``variance`` (ddof 1; NaN for fewer than two) or the quantile
    ``statistic`` (0..1, interpolated linearly) of the finite ``values`` of each group 0..n_groups-1 (NaN:
    none)."""
    v = np.asarray(values, dtype=np.float64)
    g = np.asarray(groups, dtype=np.int64)
    keep = np.isfinite(v)
    v, g = v[keep], g[keep]
    out = np.full(n_groups, np.nan)
    if v.size == 0:
        return out
    order = np.lexsort((v, g))
    v, g = v[order], g[order]
    counts = np.bincount(g, minlength=n_groups)
    present = counts > 0
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))[present]
    n = counts[present]
    if statistic == "minimum":
        out[present] = v[starts]
    elif statistic == "mean":
        out[present] = np.add.reduceat(v, starts) / n
    elif statistic == "variance":
        m = np.add.reduceat(v, starts) / n
        dev = v - np.repeat(m, n)
        with np.errstate(invalid="ignore", divide="ignore"):
            out[present] = np.where(n > 1, np.add.reduceat(dev * dev, starts) / (n - 1), np.nan)
    elif statistic == "median" or isinstance(statistic, float):
        q = 0.5 if statistic == "median" else float(statistic)
        at = q * (n - 1)
        lo = np.floor(at).astype(np.int64)
        hi = np.minimum(lo + 1, n - 1)
        out[present] = v[starts + lo] + (at - lo) * (v[starts + hi] - v[starts + lo])
    else:
        raise ValueError(f"unknown statistic {statistic!r}")
    return out


def mean_sd(a: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean, standard deviation (ddof 1) and count of the finite values along ``axis`` (NaN where too few)."""
    w = np.isfinite(a)
    n = w.sum(axis)
    with np.errstate(invalid="ignore", divide="ignore"):
        m = np.where(w, a, 0.0).sum(axis) / n
        sd = np.sqrt(np.where(w, (a - np.expand_dims(m, axis)) ** 2, 0.0).sum(axis) / (n - 1))
    return m, np.where(n > 1, sd, np.nan), n


def round_lines(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Least-squares (slope, intercept) of each round (row of ``y``, NaN = missing) against ``x``.

    ``y`` is (..., rounds, len(x)); a round with fewer than two distinct x
    gives NaN.
    """
    w = np.isfinite(y)
    yz = np.where(w, y, 0.0)
    n = w.sum(-1)
    sx, sy = (w * x).sum(-1), yz.sum(-1)
    sxx, sxy = (w * x * x).sum(-1), (yz * x).sum(-1)
    den = n * sxx - sx * sx
    with np.errstate(invalid="ignore", divide="ignore"):
        slope = np.where(den > 1e-12 * np.maximum(n * sxx, 1), (n * sxy - sx * sy) / den, np.nan)
        intercept = (sy - slope * sx) / n
    return slope, intercept


@dataclass(frozen=True)
class Lines:
    """A batch of fits (leading dimensions of the input; one fit: 0-d arrays).

    ``slope``/``intercept`` and their 95% half-widths; ``value``/``value_ci95``
    the per-x values (mean over rounds) and their 95% half-widths, (..., x);
    ``suspect`` (..., x) the points flagged and left out; ``used`` those
    fitted; ``rounds`` the rounds that gave a line; ``r`` the correlation of
    the values with x and ``r_squared`` the share of their variance about
    their mean that the line explains (the fitted points only);
    ``lack_of_fit_p`` the p-value of the F test of the points' mean
    deviations from the line against their round-to-round scatter (NaN with
    one round). ``method``: ``rounds`` or ``points`` (one round). ``resolution_u``: the Type B standard
    uncertainty the values' quantisation gives the slope and intercept (``slope``, ``intercept``) and each value,
    already in their half-widths.
    """

    slope: np.ndarray
    slope_ci95: np.ndarray
    intercept: np.ndarray
    intercept_ci95: np.ndarray
    value: np.ndarray
    value_ci95: np.ndarray
    suspect: np.ndarray
    used: np.ndarray
    rounds: np.ndarray
    r: np.ndarray
    r_squared: np.ndarray
    lack_of_fit_p: np.ndarray
    method: str
    resolution_u: dict[str, np.ndarray]


def fit(x: np.ndarray, y: np.ndarray, *, alpha: float = FLAG_ALPHA, step: float = 0.0,
        noise: np.ndarray | float | None = None) -> Lines:
    """The line through values measured in rounds: ``y`` is (..., rounds, len(x)), NaN where a visit gave nothing.

    With two rounds or more: the mean of the rounds' lines, intervals from
    their spread (t with rounds - 1 degrees of freedom). With one round: least
    squares over the points, intervals from their scatter (t with points - 2),
    which assumes the points independent. ``step``: the resolution the values
    were read to (their unit); what of its quantisation error the readings'
    noise does not dither away joins every interval as a Type B component.
    ``noise``: the standard deviation of the readings each value was reduced
    from (per fit, or one for all), by default the values' own scatter from
    round to round (right for a visit's minimum; a visit's mean or median
    is dithered by the scatter of the round trips it averages, which the
    caller knows).
    """
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    batch = y.shape[:-2]
    y = y.reshape((-1, *y.shape[-2:]))
    keep = np.isfinite(y).any(axis=1)
    most = np.floor(MAX_SUSPECT_SHARE * keep.sum(-1)).astype(np.int64)
    one_round = y.shape[1] == 1
    u_q = quantisation_u(step, _scatter(y, step) if noise is None else np.broadcast_to(noise, y.shape[:1]))
    flag = _flags_one_round if one_round else _flags_rounds
    while True:
        worst = flag(x, np.where(keep[:, None, :], y, np.nan), alpha, step, u_q)
        flagged = (np.isfinite(y).any(axis=1) & ~keep).sum(-1)
        rows = np.flatnonzero((worst >= 0) & (flagged < most))
        if rows.size == 0:
            break
        keep[rows, worst[rows]] = False
    suspect = np.isfinite(y).any(axis=1) & ~keep
    ym = np.where(keep[:, None, :], y, np.nan)
    parts = _one_round(x, ym[:, 0, :]) if one_round else _rounds(x, ym, u_q)
    ub_slope, ub_intercept = _propagated(x, keep, u_q)
    for name, ub in (("slope", ub_slope), ("intercept", ub_intercept)):
        dof = parts["rounds"] - 1 if not one_round else keep.sum(-1) - 2
        parts[f"{name}_ci95"] = expanded(type_a(parts[f"{name}_ci95"], dof), dof, ub)
    value, sd, count = mean_sd(y, 1)
    with np.errstate(invalid="ignore", divide="ignore"):
        value_ci = expanded(sd / np.sqrt(count), count - 1, u_q[:, None])
    r, r2 = _goodness(x, np.where(keep, value, np.nan), parts["slope"], parts["intercept"])
    out = dict(parts, value=value, value_ci95=value_ci, suspect=suspect, used=keep, r=r, r_squared=r2)
    resolution_u = {"slope": ub_slope, "intercept": ub_intercept, "value": np.broadcast_to(u_q[:, None], value.shape)}
    return Lines(**{k: v.reshape(batch + v.shape[1:]) for k, v in out.items()},
                 method="points" if one_round else "rounds",
                 resolution_u={k: v.reshape(batch + v.shape[1:]) for k, v in resolution_u.items()})


def _scatter(y: np.ndarray, step: float) -> np.ndarray:
    """Per fit, the standard deviation of a value from round to round (the median over the x of their variances,
    less the step's own step^2 / 12 as Sheppard corrects a quantised variance); 0 with one round."""
    if y.shape[1] < 2 or step <= 0:
        return np.zeros(y.shape[0])
    _, sd, n = mean_sd(y, 1)
    var = np.where(n >= 2, sd ** 2, np.nan)
    known = np.isfinite(var).any(axis=-1)
    median = np.zeros(var.shape[0])
    median[known] = np.nanmedian(var[known], axis=-1)
    return np.sqrt(np.clip(median - step ** 2 / 12, 0, None))


def _propagated(x: np.ndarray, keep: np.ndarray, u_q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The standard uncertainty of the slope and of the intercept of a least-squares line through the kept
    points when each carries ``u_q`` independently: u_q / sqrt(Sxx) and u_q sqrt(1/p + mean(x)^2 / Sxx)."""
    p = keep.sum(-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        xm = (keep * x).sum(-1) / p
        sxx = (keep * (x - xm[:, None]) ** 2).sum(-1)
        return u_q / np.sqrt(sxx), u_q * np.sqrt(1 / p + xm ** 2 / sxx)


def _rounds(x: np.ndarray, y: np.ndarray, u_q: np.ndarray) -> dict[str, np.ndarray]:
    slope, intercept = round_lines(x, y)
    b, b_sd, n = mean_sd(slope, -1)
    a, a_sd, _ = mean_sd(intercept, -1)
    scale = stats.t.ppf(0.975, np.maximum(n - 1, 1)) / np.sqrt(np.maximum(n, 1))
    b_ci, a_ci = scale * b_sd, scale * a_sd
    return {"slope": b, "slope_ci95": b_ci, "intercept": a, "intercept_ci95": a_ci, "rounds": n,
            "lack_of_fit_p": _lack_of_fit(x, y, slope, intercept, u_q)}


def _residuals(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Each visit's residual from its round's line."""
    slope, intercept = round_lines(x, y)
    return y - (intercept[..., None] + slope[..., None] * x)


def _flags_rounds(x: np.ndarray, y: np.ndarray, alpha: float, step: float, u_q: np.ndarray) -> np.ndarray:
    """Per fit, the point to leave out next (-1: none): the largest |t| of a point's mean residual over rounds,
    studentized by the round-to-round scatter of all points' residuals and the values' quantisation (which
    repeats in every round), if beyond the Bonferroni bound and more than one ``step`` off the line."""
    e = _residuals(x, y)
    d, _, n = mean_sd(e, -2)
    points = (n > 0).sum(-1, keepdims=True)
    rounds = np.isfinite(e).any(-1).sum(-1, keepdims=True)
    df = np.maximum((rounds - 1) * (points - 2), 1)
    w = n > 0
    with np.errstate(invalid="ignore", divide="ignore"):
        xm = (w * x).sum(-1, keepdims=True) / points
        lev = 1 / points + (x - xm) ** 2 / (w * (x - xm) ** 2).sum(-1, keepdims=True)
        scatter2 = np.nansum((e - d[..., None, :]) ** 2, (-2, -1))[..., None] / df
        t = np.abs(d) / np.sqrt((scatter2 / n + u_q[:, None] ** 2) * (1 - lev))
    bound = stats.t.ppf(1 - alpha / (2 * np.maximum(points, 1)), df)
    return _worst(np.where((n >= 2) & (points > 3) & (np.abs(d) > step), t / bound, np.nan))


def _flags_one_round(x: np.ndarray, y: np.ndarray, alpha: float, step: float, u_q: np.ndarray) -> np.ndarray:
    """The same rule for one round: externally studentized least-squares residuals, Bonferroni bound."""
    yy = y[:, 0, :]
    w = np.isfinite(yy)
    p = w.sum(-1, keepdims=True)
    slope, intercept = round_lines(x, yy[:, None, :])
    e = yy - (intercept + slope * x)
    xm = np.nansum(np.where(w, x, np.nan), -1, keepdims=True) / p
    sxx = np.nansum(np.where(w, (x - xm) ** 2, np.nan), -1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        lev = 1 / p + (x - xm) ** 2 / sxx
        sse = np.nansum(e ** 2, -1, keepdims=True)
        s2_del = (sse - e ** 2 / (1 - lev)) / (p - 3)  # the scatter without the point itself
        t = np.abs(e) / np.sqrt((s2_del + u_q[:, None] ** 2) * (1 - lev))
    bound = stats.t.ppf(1 - alpha / (2 * p), np.maximum(p - 3, 1))
    return _worst(np.where(w & (p > 4) & (np.abs(e) > step), t / bound, np.nan))


def _worst(ratio: np.ndarray) -> np.ndarray:
    """Index of the largest ratio above 1 per row, -1 where none is."""
    filled = np.where(np.isfinite(ratio), ratio, 0.0)
    k = np.argmax(filled, -1)
    return np.where(filled[np.arange(k.size), k] > 1, k, -1)


def _one_round(x: np.ndarray, y: np.ndarray) -> dict[str, np.ndarray]:
    w = np.isfinite(y)
    p = w.sum(-1)
    slope, intercept = round_lines(x, y[:, None, :])
    slope, intercept = slope[:, 0], intercept[:, 0]
    e = np.where(w, y - (intercept[:, None] + slope[:, None] * x), 0.0)
    xm = (w * x).sum(-1) / np.maximum(p, 1)
    sxx = (w * (x - xm[:, None]) ** 2).sum(-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        s = np.sqrt((e ** 2).sum(-1) / (p - 2))
        t = stats.t.ppf(0.975, np.maximum(p - 2, 1))
        b_ci = np.where(p > 2, t * s / np.sqrt(sxx), np.nan)
        a_ci = np.where(p > 2, t * s * np.sqrt(1 / p + xm ** 2 / sxx), np.nan)
    return {"slope": slope, "slope_ci95": b_ci, "intercept": intercept, "intercept_ci95": a_ci,
            "rounds": np.isfinite(slope).astype(np.int64), "lack_of_fit_p": np.full(slope.shape, np.nan)}


def _lack_of_fit(x: np.ndarray, y: np.ndarray, slope: np.ndarray, intercept: np.ndarray, u_q: np.ndarray
                 ) -> np.ndarray:
    """p of F = [mean square of the points' mean residuals] / [mean square of the residuals about those means,
    plus what the values' quantisation adds to the former: it repeats in every round, so it never averages out]."""
    e = y - (intercept[..., None] + slope[..., None] * x)
    d, _, n = mean_sd(e, -2)
    points = (n > 0).sum(-1)
    rounds = np.isfinite(slope).sum(-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        between = np.nansum(n * d ** 2, -1) / (points - 2)
        df_within = (rounds - 1) * (points - 2)
        within = np.nansum((e - d[..., None, :]) ** 2, (-2, -1)) / df_within
        quantised = np.nansum(n, -1) / np.maximum(points, 1) * u_q ** 2
        p = stats.f.sf(between / (within + quantised), points - 2, df_within)
    return np.where((points > 2) & (df_within > 0), p, np.nan)


def _goodness(x: np.ndarray, value: np.ndarray, slope: np.ndarray, intercept: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray]:
    """Correlation of the values with x, and 1 - SS(about the line) / SS(about their mean)."""
    w = np.isfinite(value)
    p = w.sum(-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        vm = np.nansum(value, -1) / p
        xm = (w * x).sum(-1) / p
        dv = np.where(w, value - vm[:, None], 0.0)
        dx = np.where(w, x - xm[:, None], 0.0)
        r = (dv * dx).sum(-1) / np.sqrt((dv ** 2).sum(-1) * (dx ** 2).sum(-1))
        resid = np.where(w, value - (intercept[:, None] + slope[:, None] * x), 0.0)
        r2 = 1 - (resid ** 2).sum(-1) / (dv ** 2).sum(-1)
    return np.where(p > 2, r, np.nan), np.where(p > 2, r2, np.nan)
