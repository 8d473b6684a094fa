"""Numbers as a measurement states them: a value rounded to the precision its uncertainty gives it.

The convention is the GUM's (JCGM 100:2008, §7.2.6): the uncertainty with
at most two significant digits, the value rounded to the same decimal place,
so "0.00059 ± 0.00057 us/byte", never "0.000591734 ± 0.0005712". A value
without an uncertainty keeps four significant digits; counts are integers.
The report's tables, its sentences and the command line all format through
these functions, so a number reads the same everywhere it appears.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np

#: Significant digits of an uncertainty, and of a value that has none.
UNCERTAINTY_DIGITS = 2
VALUE_DIGITS = 4


def plain(v: Any) -> Any:
    """NumPy scalars and Fractions as Python numbers; other values unchanged."""
    if isinstance(v, Fraction):
        return float(v)
    if isinstance(v, np.generic):
        return v.item()
    return v


def decimals_of(ci95: float) -> int | None:
    """Decimal places that keep two significant digits of ``ci95`` (negative: round to tens, hundreds ...).

    None when there is no usable uncertainty (NaN, infinite or zero).
    """
    if not (isinstance(ci95, (int, float)) and math.isfinite(ci95) and ci95 > 0):
        return None
    return UNCERTAINTY_DIGITS - 1 - math.floor(math.log10(ci95))


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


def measured(v: float, ci95: float, unit: str = "") -> str:
    """"value ± ci95 unit", both at the precision of ``ci95`` (the value alone when ``ci95`` is unknown)."""
    tail = f" {unit}" if unit else ""
    places = decimals_of(ci95)
    if places is None:
        return number(v) + tail
    return f"{number(v, decimals=places)} ± {number(ci95, decimals=places)}{tail}"


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
