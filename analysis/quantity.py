"""Numbers as a measurement states them: a value rounded to the precision its uncertainty gives it.

The convention is the GUM's (JCGM 100:2008, §7.2.6): the uncertainty with
at most two significant digits, the value rounded to the same decimal place,
so "0.00059 ± 0.00057 us/byte", never "0.000591734 ± 0.0005712". A value
without an uncertainty keeps four significant digits; counts are integers.
The report's tables, its sentences, the command line and the GUI all format
through these functions, so a number reads the same everywhere it appears.

An uncertainty is never finer than the measurement resolves: a value read
from time stamps quantised to a step (the sample clock of a capture, the
1 ns of a results file, the clock of a simulated bus) carries the step as a
Type B component, a rectangular distribution of standard uncertainty
step / sqrt(12) (GUM §4.3.7, F.2.2.1), combined in quadrature with the
Type A part (the spread of repeated measurements) and expanded to 95% with
the Welch-Satterthwaite degrees of freedom (GUM §G.4.1, G.6.4). A noiseless
measurement so gets a finite interval that says what its clock resolves.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np

#: Significant digits of an uncertainty, and of a value that has none.
UNCERTAINTY_DIGITS = 2
VALUE_DIGITS = 4


#: Coverage factor of a normal distribution at 95% (a Type B part alone has infinite degrees of freedom).
K95 = 1.959963984540054


def t975(dof: Any) -> Any:
    """Student's t at 0.975 for ``dof`` degrees of freedom (infinite: :data:`K95`). ``scipy.special`` only:
    ``nicrig simulate`` formats through this module and ``scipy.stats`` would add a second to its start."""
    from scipy.special import stdtrit

    dof = np.asarray(dof, dtype=np.float64)
    out = np.where(np.isfinite(dof), stdtrit(np.where(np.isfinite(dof), dof, 1.0), 0.975), K95)
    return float(out) if out.ndim == 0 else out


def rectangular(step: Any) -> Any:
    """Standard uncertainty of a value read to a resolution ``step`` (same unit): step / sqrt(12), the
    rectangular distribution of the quantisation error (GUM §F.2.2.1)."""
    return np.asarray(step, dtype=np.float64) / math.sqrt(12.0) if np.ndim(step) else float(step) / math.sqrt(12.0)


def quantisation_u(step: Any, noise: Any = 0.0) -> Any:
    """Standard uncertainty of a reading quantised to ``step`` that noise of standard deviation ``noise`` (same
    unit) does not average away: step / sqrt(12) without noise (the rectangular distribution of GUM §F.2.2.1),
    falling to nothing as the noise dithers the quantiser (each harmonic k of the quantisation error's sawtooth is
    damped by exp(-2 pi^2 k^2 noise^2 / step^2): Widrow and Kollar 2008, "Quantization Noise", ch. 5). The part
    noise does average away shows in the spread of repeated readings, the Type A part. Broadcasts."""
    st = np.asarray(step, dtype=np.float64)
    sd = np.asarray(noise, dtype=np.float64)
    k = np.arange(1, 41, dtype=np.float64).reshape((-1,) + (1,) * max(st.ndim, sd.ndim))
    with np.errstate(invalid="ignore", divide="ignore"):
        damp = np.exp(-4 * math.pi ** 2 * k ** 2 * np.where(st > 0, sd / st, 0.0) ** 2)
        terms = damp / k ** 2
        # the harmonics beyond the 40th, as undamped as the 40th (1/k^2 sums to pi^2 / 6)
        tail = (math.pi ** 2 / 6 - float(np.sum(1 / k ** 2))) * damp[-1]
        out = st / (math.sqrt(2) * math.pi) * np.sqrt(terms.sum(axis=0) + tail)
    return float(out) if out.ndim == 0 else out


def expanded(u_a: Any, dof_a: Any, u_b: Any) -> Any:
    """The 95% expanded uncertainty of a Type A standard uncertainty ``u_a`` (``dof_a`` degrees of freedom) and
    a Type B one ``u_b`` (infinite degrees of freedom), combined in quadrature: k u_c with k Student's t at the
    Welch-Satterthwaite degrees of freedom u_c^4 / (u_a^4 / dof_a) (GUM §G.4.1).

    Broadcasts over arrays. NaN where ``u_a`` is NaN (no spread known); ``u_a`` 0 gives k of a normal
    distribution; a ``dof_a`` below 1 counts as 1.
    """
    ua = np.asarray(u_a, dtype=np.float64)
    ub = np.asarray(u_b, dtype=np.float64)
    dof = np.maximum(np.asarray(dof_a, dtype=np.float64), 1.0)
    uc2 = ua ** 2 + ub ** 2
    with np.errstate(invalid="ignore", divide="ignore"):
        nu = np.where(ua > 0, uc2 ** 2 / (ua ** 4 / dof), np.inf)
    out = t975(nu) * np.sqrt(uc2)
    return float(out) if out.ndim == 0 else out


def type_a(ci95: Any, dof: Any) -> Any:
    """The standard uncertainty behind a Student t 95% half-width with ``dof`` degrees of freedom."""
    dof = np.maximum(np.asarray(dof, dtype=np.float64), 1.0)
    out = np.asarray(ci95, dtype=np.float64) / t975(dof)
    return float(out) if out.ndim == 0 else out


def plain(v: Any) -> Any:
    """NumPy scalars and Fractions as Python numbers; other values unchanged."""
    if isinstance(v, Fraction):
        return float(v)
    if isinstance(v, np.generic):
        return v.item()
    return v


def decimals_of(ci95: float, digits: int = UNCERTAINTY_DIGITS) -> int | None:
    """Decimal places that keep ``digits`` significant digits of ``ci95`` (negative: round to tens, hundreds ...).

    None when there is no usable uncertainty (NaN, infinite or zero). The digits are counted after rounding,
    so 9.96 keeps "10", not "10.0".
    """
    if not (isinstance(ci95, (int, float)) and math.isfinite(ci95) and ci95 > 0):
        return None
    rounded = float(f"{ci95:.{digits - 1}e}")
    return digits - 1 - math.floor(math.log10(rounded))


def number(v: Any, *, ci95: float | None = None, decimals: int | None = None) -> str:
    """``v`` as text: to ``decimals`` places, else to the precision of ``ci95``, else four significant digits.

    Integers stay whole unless a precision is given; NaN, infinities and None are "–";
    thousands are separated by commas from 10,000 on.
    """
    v = plain(v)
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "–"
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return str(v)
    places = decimals if decimals is not None else decimals_of(ci95) if ci95 is not None else None
    if isinstance(v, int) and places is None:
        return f"{v:,}" if abs(v) >= 10_000 else str(v)
    v = float(v)
    if places is None:
        if v == 0:
            return "0"
        if abs(v) < 1e-4:  # a p-value, a tiny share: the digits that matter, not a row of zeros
            return f"{v:.{VALUE_DIGITS - 1}e}"
        places = VALUE_DIGITS - 1 - math.floor(math.log10(abs(v)))
    if places < 0:  # a coarse uncertainty: round to tens, hundreds ...
        v = round(v, places)
        places = 0
    text = f"{v:,.{places}f}" if abs(v) >= 10_000 else f"{v:.{places}f}"
    return text[1:] if text.startswith("-") and not text.strip("-0.,") else text


def places(ci95: float, step: float | None = None) -> int | None:
    """Decimal places of a value with 95% half-width ``ci95`` (:func:`decimals_of`), never finer than the place of
    the leading digit of the readings' resolution ``step`` (same unit), where two digits of a half-width made of
    that resolution would resolve a fraction of the clock's tick. None without a usable ``ci95``."""
    out = decimals_of(ci95)
    coarsest = decimals_of(step, 1) if step is not None else None
    return min(out, coarsest) if out is not None and coarsest is not None else out


def measured(v: float, ci95: float, unit: str = "", step: float | None = None) -> str:
    """"value ± ci95 unit", both at the precision of ``ci95`` (the value alone when ``ci95`` is unknown), never
    finer than the readings' resolution ``step`` (:func:`places`). A ``ci95`` that includes that resolution (at
    least ``K95 * step / sqrt(12)``) never rounds to zero there."""
    tail = f" {unit}" if unit else ""
    at = places(ci95, step)
    if at is None:
        return number(v) + tail
    return f"{number(v, decimals=at)} ± {number(ci95, decimals=at)}{tail}"


def quantile_interval(values: Any, q: float, step: float = 0.0) -> tuple[float, float]:
    """The ``q``-quantile of ``values`` and its 95% half-width, in their unit (NaN: no values; half-width NaN where
    there are too few for a two-sided interval); ``step``: the values' resolution.

    Distribution-free: the order statistics whose ranks bound a Binomial(n, q) count's central 95% enclose the
    quantile with at least that probability (Conover, Practical Nonparametric Statistics, 1999, §3.2); the
    half-width is half their distance, combined with the resolution ``step`` (a rectangular distribution, GUM
    §F.2.2.1) so that a run of equal values keeps a finite interval."""
    from scipy.stats import binom

    n = len(values)
    if not n:
        return math.nan, math.nan
    x = np.sort(np.asarray(values, dtype=np.float64))
    value = float(np.percentile(x, 100 * q))
    lo, hi = int(binom.ppf(0.025, n, q)), int(binom.ppf(0.975, n, q)) + 1  # 1-based ranks
    if lo < 1 or hi > n:
        return value, math.nan
    half = (x[hi - 1] - x[lo - 1]) / 2
    return value, math.hypot(half, K95 * rectangular(step))


def resolved(v: Any, resolution_u: Any) -> str:
    """A value known to its time stamps' resolution alone (Type B standard uncertainty ``resolution_u``, same
    unit), printed without that half-width beside it: rounded to the 95% half-width the resolution gives, to two
    significant digits when they begin with 1 or 2 and to one otherwise (0.012 but 0.006: a second digit of a
    bound stated once for the column adds nothing); four significant digits without one. Integers (counts) stay
    whole."""
    if isinstance(plain(v), int) or resolution_u is None or not np.isfinite(resolution_u) or resolution_u <= 0:
        return number(v)
    half = K95 * float(resolution_u)
    return number(v, decimals=decimals_of(half, _stated_digits(half)))


def _stated_digits(half: float) -> int:
    """Significant digits a half-width stated once, from a resolution, keeps: two when they begin with 1 or 2."""
    return UNCERTAINTY_DIGITS if int(f"{half:e}"[0]) < 3 else 1


def resolution_half_width(resolution_u: float) -> str:
    """The 95% half-width a resolution alone gives (standard uncertainty ``resolution_u``), as :func:`resolved`
    states it."""
    half = K95 * float(resolution_u)
    return number(half, decimals=decimals_of(half, _stated_digits(half)))


def resolved_measured(v: Any, resolution_u: float, unit: str = "") -> str:
    """"value ± U unit" for a value known to its resolution alone, both as :func:`resolved` rounds them."""
    half = K95 * float(resolution_u)
    places = decimals_of(half, _stated_digits(half))
    tail = f" {unit}" if unit else ""
    return f"{number(v, decimals=places)} ± {number(half, decimals=places)}{tail}"


def interval(v: float, ci95: float) -> str:
    """The 95% interval "[lo, hi]" at the precision of ``ci95``."""
    places = decimals_of(ci95)
    return f"[{number(v - ci95, decimals=places)}, {number(v + ci95, decimals=places)}]"


def setting(v: Any) -> str:
    """A value the run was given (a spacing, a size), printed as given: 10, 12.5, 0."""
    v = plain(v)
    if isinstance(v, float) and math.isfinite(v):
        return f"{v:g}"
    return number(v)
