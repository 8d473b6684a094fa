"""A report as one self-contained HTML page (a Jinja2 template), as JSON, or as CSV: the same numbers in each.

The page has a table of contents with an anchor for every section, table and
figure; every table says where its numbers come from and, when it shows
only some of its rows, which ("first 8 of 2000 rows"). Numbers are printed
at the precision their uncertainty or resolution gives them
(:mod:`nicrig.analysis.quantity`); JSON and CSV carry the full values, the
same rows and columns, the same sentences.

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
from nicrig.analysis.quantity import measured, number, plain, setting

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


def cell_texts(t: Table) -> list[list[str]]:
    """Each cell as the page prints it: to the precision of its ± column, its fixed decimals, or 4 digits."""
    col = {c: k for k, c in enumerate(t.columns)}
    out = []
    for row in t.rows:
        texts = []
        for k, (c, v) in enumerate(zip(t.columns, row)):
            if c in t.uncertainty:
                texts.append(number(v, ci95=finite(row[col[t.uncertainty[c]]])))
            elif c in t.uncertainty.values():
                texts.append(number(v, ci95=finite(v)))
            elif c in t.decimals and not isinstance(v, int):  # a count in a column of times stays whole
                texts.append(number(v, decimals=t.decimals[c]))
            elif c in t.settings:
                texts.append(setting(v))
            else:
                texts.append(number(v))
        out.append(texts)
    return out


def item_text(value: Any, ci95: Any, decimals: int | None = None) -> str:
    """An item's value: at the precision of its uncertainty, else of its measurement's resolution, if known."""
    if ci95 is not None and finite(ci95) is not None:
        return measured(finite(value), finite(ci95))
    return number(value, decimals=decimals)


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.globals.update(cell_texts=cell_texts, item_text=item_text, number=number,
                       png=lambda data: base64.b64encode(data).decode("ascii"))
    return env


def to_html(report: Report) -> str:
    """One self-contained page: contents, sections with tables, figures as PNG data URIs, sentences, sources."""
    assign_anchors(report.sections)
    return _environment().get_template("report.html.j2").render(report=report, version=__version__)


def to_json(report: Report) -> str:
    """Every item and table with its source; figures by title and caption (their data are the tables)."""
    assign_anchors(report.sections)

    def sec(s: Section) -> dict[str, Any]:
        return {"title": s.title, "anchor": s.anchor, "file": s.file, "simulated": s.simulated or None,
                "items": [{"label": i.label, "value": finite(i.value), "ci95": finite(i.ci95), "unit": i.unit,
                           "source": i.source, "expected": finite(i.expected)} for i in s.items],
                "tables": [{"title": t.title, "columns": t.columns, "source": t.source, "note": t.note,
                            "excerpt": t.excerpt, "rows": [[finite(v) for v in r] for r in t.rows]}
                           for t in s.tables],
                "figures": [{"title": c.title, "caption": c.caption} for c in s.charts],
                "interpretation": s.text, **({"data": s.data} if s.data else {})}
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
