"""A report's sentences and what they quote: every measured number in a sentence is a cell of a table (or an
item) of the same section, named with the very text the page prints for it.

A :class:`Sentence` is a ``str`` (it reads, joins and compares as one) that
also carries its :class:`Cite` s, the settings and constants it states
(``given``) and the terms it defines (``defines``, drawn as ``<dfn>`` on the
page). :mod:`nicrig.analysis.lint` reads them back from the HTML or JSON and
checks each quoted text against the table cell it names, so a sentence can
never state a number its table does not show.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from nicrig.analysis.quantity import measured, number


@dataclass(frozen=True)
class Cite:
    """A number a sentence quotes: ``text`` as printed in column ``column`` of the section's table titled
    ``table``, in a row whose first cell reads ``row`` (empty: any row); ``table`` empty: the section's item
    labelled ``column`` (its value or its expected value)."""

    table: str
    column: str
    text: str
    row: str = ""

    def as_dict(self) -> dict[str, str]:
        return {"table": self.table, "column": self.column, "text": self.text, "row": self.row}


class Sentence(str):
    """A sentence with the cells it quotes (``cites``), the numbers it states that are settings or constants
    rather than measurements (``given``: a spacing asked for, a criterion, a figure of a paper), and the terms it
    defines (``defines``)."""

    cites: tuple[Cite, ...]
    given: tuple[str, ...]
    defines: tuple[str, ...]

    def __new__(cls, text: str, cites: Iterable[Cite] = (), *, given: Iterable[str] = (),
                defines: Iterable[str] = ()) -> Sentence:
        s = super().__new__(cls, text)
        s.cites = tuple(cites)
        s.given = tuple(given)
        s.defines = tuple(defines)
        return s

    def __reduce__(self) -> tuple[Any, ...]:
        return Sentence, (str(self), self.cites), {"given": self.given, "defines": self.defines}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.given, self.defines = state["given"], state["defines"]


class Quotes:
    """Collects the cells a sentence quotes while it is written, then makes the :class:`Sentence`.

    ``q(table, column, text)`` returns ``text`` and notes the cite; :meth:`measured` writes "value ± U unit" as
    :func:`nicrig.analysis.quantity.measured` does and notes both cells; :meth:`sentence` hands the notes to a
    sentence and starts afresh.
    """

    def __init__(self) -> None:
        self._cites: list[Cite] = []

    def __call__(self, table: str, column: str, text: str, row: str = "") -> str:
        self._cites.append(Cite(table, column, text, row))
        return text

    def measured(self, table: str, column: str, uncertainty_column: str, value: float, ci95: float,
                 unit: str = "", row: str = "") -> str:
        """``value ± ci95 unit`` as the table's two cells print them, both quoted."""
        self(table, column, number(value, ci95=ci95), row)
        if number(ci95, ci95=ci95) != "–":
            self(table, uncertainty_column, number(ci95, ci95=ci95), row)
        return measured(value, ci95, unit)

    def sentence(self, text: str, *, given: Iterable[str] = (), defines: Iterable[str] = ()) -> Sentence:
        out = Sentence(text, self._cites, given=given, defines=defines)
        self._cites = []
        return out


def cites_of(text: str) -> tuple[Cite, ...]:
    """The cells ``text`` quotes (none for a plain string)."""
    return getattr(text, "cites", ())


def given_of(text: str) -> tuple[str, ...]:
    return getattr(text, "given", ())


def defines_of(text: str) -> tuple[str, ...]:
    return getattr(text, "defines", ())


def prefixed(prefix: str, text: str) -> Sentence:
    """``prefix + text`` keeping what ``text`` quotes, gives and defines (a sweep step's name before its
    sentence)."""
    return Sentence(prefix + text, cites_of(text), given=given_of(text), defines=defines_of(text))
