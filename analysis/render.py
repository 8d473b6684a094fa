"""A report as one self-contained HTML page (a Jinja2 template), as JSON, or as CSV: the same numbers in each.

The page has a table of contents with an anchor for every section, table and
figure; every table says where its numbers come from and, when it shows
only some of its rows, which ("first 8 of 2000 rows"). Numbers are printed
at the precision their uncertainty or resolution gives them
(:mod:`nicrig.analysis.quantity`), the same text in the page and in the JSON
(``rows``, an item's ``value``); the JSON keeps the full values beside them
(``raw_rows``, ``raw``) and CSV carries only those. The page and the JSON both
say what :mod:`nicrig.analysis.lint` checks: which column holds a value's
half-width, the Type B part the time stamps' resolution gives it, which cells a
sentence quotes, which terms it defines, how many marks each figure draws.

A section is drawn by ``templates/sections/<section.template>.html.j2``
(``generic`` draws sentences, items, figures and tables); a new kind of
section adds a function returning its :class:`~nicrig.analysis.report.Section`
(with ``template`` and any ``data`` it needs) and a template of that name,
which may include ``generic`` and add to it.
"""

from __future__ import annotations

import base64
import csv
import io
import json
import math
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jinja2

from nicrig import __version__
from nicrig.analysis.quantity import (measured, number, plain, resolution_half_width, resolved, resolved_measured,
                                     setting)
from nicrig.analysis.sentence import cites_of, defines_of, given_of

if TYPE_CHECKING:
    from nicrig.analysis.report import Report, Section, Table

TEMPLATES = Path(__file__).parent / "templates"


def finite(v: Any) -> Any:
    """NaN and infinities as None (JSON has no NaN); Fractions and NumPy scalars as plain numbers."""
    v = plain(v)
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "section"


def assign_anchors(sections: list[Section]) -> None:
    """Give every section a unique anchor, ``s<n>-<slug of its title>``; its tables and figures add ``-t<k>`` and
    ``-f<k>`` (the template does)."""
    for n, s in enumerate(sections, start=1):
        s.anchor = f"s{n}-{slug(s.title)[:48]}"


def value_text(t: Table, column: str, row: int, v: Any) -> str:
    """``v`` as table ``t`` prints it in ``column`` of row ``row``: to the precision of its ± column, its fixed
    decimals, as a setting is given, to its time stamps' resolution, or to four digits."""
    col = {c: k for k, c in enumerate(t.columns)}
    if column in t.uncertainty:
        return number(v, ci95=finite(t.rows[row][col[t.uncertainty[column]]]))
    if column in t.uncertainty.values():
        return number(v, ci95=finite(v))
    if column in t.decimals and not isinstance(plain(v), int):  # a count in a column of times stays whole
        return number(v, decimals=t.decimals[column])
    if column in t.settings:
        return setting(v)
    if column in t.resolution:
        return resolved(v, t.resolution_u(column, row))
    return number(v)


def cell_texts(t: Table) -> list[list[str]]:
    """Each cell as the page prints it (:func:`value_text`)."""
    return [[value_text(t, c, k, v) for c, v in zip(t.columns, row)] for k, row in enumerate(t.rows)]


def resolution_note(t: Table) -> str:
    """What the time stamps' resolution gives the columns without a ± column of their own: "on the wire (us)
    ± 0.0064" (95%), after what that resolution is."""
    said = []
    for c, r in t.resolution.items():
        if c in t.uncertainty:
            continue
        us = sorted({u for u in (r if isinstance(r, (list, tuple)) else [r]) if u is not None})
        if us:
            said.append(f"{c} ± {resolution_half_width(us[0])}" + (f" to {resolution_half_width(us[-1])}"
                                                                     if len(us) > 1 else ""))
    head = f"Resolution: {t.resolution_text}" if t.resolution_text else ""
    tail = f"values without a ± column are good to (95%): {'; '.join(said)}" if said else ""
    return "; ".join(x for x in (head, tail) if x)


def item_text(value: Any, ci95: Any, decimals: int | None = None, resolution_u: float | None = None) -> str:
    """An item's value: at the precision of its uncertainty, else of its time stamps' resolution (whose 95%
    half-width it then states), else of its fixed decimals, if known."""
    if ci95 is not None and finite(ci95) is not None:
        return measured(finite(value), finite(ci95))
    if resolution_u is not None and finite(value) is not None and isinstance(plain(value), float):
        return resolved_measured(finite(value), resolution_u)
    return number(value, decimals=decimals)


def cites_json(text: str) -> str:
    """A sentence's quotes, givens and definitions as the page's data attributes carry them (JSON)."""
    return json.dumps({"cites": [c.as_dict() for c in cites_of(text)], "given": list(given_of(text)),
                       "defines": list(defines_of(text))}, ensure_ascii=False)


def with_definitions(text: str) -> Any:
    """A sentence as HTML, the terms it defines marked ``<dfn>`` at their first mention in it, hyphenated or not
    (a "main-mode median" mentions the main mode, as the checks of :mod:`nicrig.analysis.lint` read it)."""
    from markupsafe import Markup, escape

    html = str(escape(text))
    for term in defines_of(text):
        words = r"[- ]".join(re.escape(str(escape(w))) for w in term.split(" "))
        html = re.sub(rf"\b({words})\b", r"<dfn>\1</dfn>", html, count=1, flags=re.IGNORECASE)
    return Markup(html)


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.globals.update(cell_texts=cell_texts, item_text=item_text, number=number, resolution_note=resolution_note,
                       cites_json=cites_json, with_definitions=with_definitions, json=json.dumps,
                       png=lambda data: base64.b64encode(data).decode("ascii"))
    return env


def to_html(report: Report) -> str:
    """One self-contained page: contents, sections with tables, figures as PNG data URIs, sentences, sources."""
    assign_anchors(report.sections)
    return _environment().get_template("report.html.j2").render(report=report, version=__version__)


def to_json(report: Report) -> str:
    """Every item and table with its source, each number as the page prints it (``rows``, an item's ``value``)
    beside its full value (``raw_rows``, ``raw``); the sentences with what they quote; figures by title, caption
    and the marks each panel draws (their data are the tables)."""
    assign_anchors(report.sections)

    def table(t: Table) -> dict[str, Any]:
        return {"title": t.title, "columns": t.columns, "source": t.source, "note": t.note,
                "excerpt": t.excerpt, "rows": cell_texts(t), "raw_rows": [[finite(v) for v in r] for r in t.rows],
                "uncertainty": t.uncertainty,
                "resolution_u": {c: ([finite(u) for u in r] if isinstance(r, (list, tuple)) else finite(r))
                                 for c, r in t.resolution.items()},
                "resolution": resolution_note(t)}

    def sec(s: Section) -> dict[str, Any]:
        return {"title": s.title, "anchor": s.anchor, "file": s.file, "simulated": s.simulated or None,
                "items": [{"label": i.label, "value": item_text(i.value, i.ci95, i.decimals, i.resolution_u),
                           "unit": i.unit, "source": i.source,
                           "expected": "" if i.expected is None else number(i.expected),
                           "raw": {"value": finite(i.value), "ci95": finite(i.ci95), "expected": finite(i.expected),
                                   "resolution_u": finite(i.resolution_u)}} for i in s.items],
                "tables": [table(t) for t in s.tables],
                "figures": [{"title": c.title, "caption": c.caption, "panels": list(c.panels)} for c in s.charts],
                "interpretation": list(s.text),
                "quotes": [json.loads(cites_json(x)) for x in s.text], **({"data": s.data} if s.data else {})}
    return json.dumps({"title": report.title, "created_utc": report.created_utc, "nicrig_version": __version__,
                       "inputs": report.inputs, "problems": report.problems,
                       "sections": [sec(s) for s in report.sections]}, indent=1, allow_nan=False)


def to_csv(report: Report) -> str:
    """One row per number: section, file, table (empty for items), row, column, value, its 95% half-width (items),
    unit, expected, source."""
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(["section", "file", "table", "row", "column", "value", "ci95", "unit", "expected", "source"])
    for s in report.sections:
        for i in s.items:
            w.writerow([s.title, s.file, "", "", i.label, _cell(i.value), _cell(i.ci95), i.unit, _cell(i.expected),
                        i.source])
        for t in s.tables:
            for n, r in enumerate(t.rows):
                for col, v in zip(t.columns, r):
                    w.writerow([s.title, s.file, t.title, n, col, _cell(v), "", "", "", t.source])
    return out.getvalue()


def _cell(v: Any) -> str:
    v = finite(v)
    return "" if v is None else str(v)


RENDERERS = {"html": to_html, "json": to_json, "csv": to_csv}
