"""Checks a rendered report, HTML or JSON, against what it claims: a reader's errata found before the reader.

A report (:mod:`nicrig.analysis.render`) says in its page and its JSON which
column holds each value's 95% half-width, the Type B part the time stamps'
resolution gives a cell, which table cells each sentence quotes, which terms
it defines and how many marks each figure draws. :func:`problems` reads that
back and lists every place where the report breaks its own rules:

* a value shown with more digits than its uncertainty allows (GUM, JCGM
  100:2008 §7.2.6: the uncertainty to at most two significant digits, the
  value rounded to the same place), or a long decimal with no uncertainty;
* an uncertainty below what the stated resolution gives;
* a sentence whose quoted number is not the cell it names, or that states a
  measured number (one with a unit) it quotes from no table;
* a figure with a panel that draws fewer than two marks;
* a term of :data:`TERMS` used before it is defined;
* a citation without a year, one missing from "Sources cited", a source never
  cited, or the source documents named as seeds ("the seed", "seed 002") instead of by author and year.

``python -m nicrig.analysis.lint REPORT...`` prints the problems of each file
and exits 1 when there are any.
"""

from __future__ import annotations

import json
import math
import re
import sys
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

from nicrig.analysis.citations import REFERENCES
from nicrig.analysis.quantity import K95

#: Terms a reader needs defined where the report first uses them, and how they appear.
TERMS = {"visit": r"\bvisits?\b", "main mode": r"\bmain[- ]mode\b", "lack of fit p": r"\black of fit p\b"}
#: A decimal number shown without an uncertainty may have at most this many significant digits.
MAX_PLAIN_DIGITS = 6
#: Units after which a number in a sentence is a measurement that must be quoted from a table.
MEASURED_UNITS = r"(?:us/byte|Mbit/s|MB/s|us|ns|ms|jiffies|%)"
NUMBER = r"[-−]?\d[\d,]*(?:\.\d+)?"
MEASURED = re.compile(rf"(?<![\w.§/-]){NUMBER}(?=\s?(?:±|{MEASURED_UNITS}(?![\w/])))")
ANY_NUMBER = re.compile(rf"(?<![\w.§/-]){NUMBER}")
YEARLESS = re.compile(r"\bet al\.(?!'?s?\s+(?:\d{4}|n\.d\.))")
AUTHOR_YEAR = re.compile(r"\b[A-Z][\w-]+ et al\. (?:\d{4}|n\.d\.)")
SEED_WORDS = re.compile(r"\bthe seeds?\b(?! \d)|\bseeds? 0\d\d\b", re.IGNORECASE)
SOURCES_TABLE = "Sources cited"


@dataclass
class Table:
    title: str
    columns: list[str]
    rows: list[list[str]]
    uncertainty: dict[str, str] = field(default_factory=dict)
    #: per column, the Type B standard uncertainty of each row's cell (None: none stated)
    resolution_u: dict[str, list[float | None]] = field(default_factory=dict)


@dataclass
class Item:
    label: str
    value: str
    expected: str = ""
    resolution_u: float | None = None


@dataclass
class Sentence:
    text: str
    cites: list[dict[str, str]] = field(default_factory=list)
    given: list[str] = field(default_factory=list)
    defines: list[str] = field(default_factory=list)


@dataclass
class Section:
    title: str
    sentences: list[Sentence] = field(default_factory=list)
    items: list[Item] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    figures: list[tuple[str, list[int]]] = field(default_factory=list)


@dataclass
class Document:
    """A report as the checks read it: its sections, and all its text in reading order as (text, defines, where)
    with ``where`` "nav" for the contents, "sources" for the list of sources, else "body"."""

    sections: list[Section] = field(default_factory=list)
    flow: list[tuple[str, tuple[str, ...], str]] = field(default_factory=list)


# -- reading a report ----------------------------------------------------------------------------------

def from_json(text: str) -> Document:
    """The document a report's JSON holds."""
    doc = Document()
    for s in json.loads(text)["sections"]:
        sec = Section(s["title"])
        doc.flow.append((s["title"], (), "body"))
        for t, q in zip(s["interpretation"], s.get("quotes", [{}] * len(s["interpretation"]))):
            sec.sentences.append(Sentence(t, q.get("cites", []), q.get("given", []), q.get("defines", [])))
            doc.flow.append((t, tuple(q.get("defines", [])), "body"))
        for i in s["items"]:
            sec.items.append(Item(i["label"], str(i["value"]), str(i.get("expected") or ""),
                                  (i.get("raw") or {}).get("resolution_u")))
            doc.flow.append((f"{i['label']} {i['source']}", (), "body"))
        for f in s["figures"]:
            sec.figures.append((f["title"], list(f.get("panels", []))))
            doc.flow.append((f"{f['title']} {f['caption']}", (), "body"))
        for t in s["tables"]:
            n = len(t["rows"])
            res = {c: (list(r) if isinstance(r, list) else [r] * n) for c, r in t.get("resolution_u", {}).items()}
            sec.tables.append(Table(t["title"], t["columns"], [[str(v) for v in r] for r in t["rows"]],
                                    t.get("uncertainty", {}), res))
            where = "sources" if t["title"] == SOURCES_TABLE else "body"
            doc.flow.append((t["title"], (), "body"))
            doc.flow += [(" | ".join(t["columns"]), (), where)]
            doc.flow += [(" | ".join(str(v) for v in r), (), where) for r in t["rows"]]
            doc.flow.append((f"{t['source']} {t['note']} {t.get('resolution', '')}", (), "body"))
        doc.sections.append(sec)
    return doc


class _Page(HTMLParser):
    """The document a report's HTML page holds, read from its elements and data attributes."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.doc = Document()
        self.sec: Section | None = None
        self.stack: list[str] = []
        self.text: list[str] | None = None  # the element being read
        self.kind = ""
        self.attrs: dict[str, str] = {}
        self.table: Table | None = None
        self.items = False
        self.row: list[str] | None = None
        self.row_u: list[float | None] = []
        self.header: list[str] = []
        self.header_u: dict[str, str] = {}
        self.dfn = 0
        self.nav = 0
        self.title = ""

    # the flow of text, for the terms: what is inside <dfn> and <nav>
    def _flow(self, text: str) -> None:
        where = "nav" if self.nav else ("sources" if self.title == SOURCES_TABLE and self.table is not None
                                        else "body")
        defines = ("*",) if self.dfn else ()
        if text.strip():
            self.doc.flow.append((text, defines, where))

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "nav":
            self.nav += 1
        elif tag == "dfn":
            self.dfn += 1
        elif tag == "section":
            self.sec = Section("")
            self.doc.sections.append(self.sec)
        elif tag in ("h2", "h3", "p", "figcaption") and self.sec is not None:
            self.text, self.kind, self.attrs = [], tag, a
        elif tag == "figure" and self.sec is not None:
            self.sec.figures.append(("", json.loads(a.get("data-panels", "[]"))))
        elif tag == "table" and self.sec is not None:
            self.items = "items" in a.get("class", "")
            self.table = None if self.items else Table(self.title, [], [])
            self.header, self.header_u = [], {}
        elif tag == "tr":
            self.row, self.row_u = [], []
        elif tag in ("td", "th"):
            self.text, self.kind, self.attrs = [], tag, a

    def handle_endtag(self, tag: str) -> None:
        if tag == "nav":
            self.nav -= 1
        elif tag == "dfn":
            self.dfn -= 1
        elif tag in ("h2", "h3", "p", "figcaption") and self.text is not None and self.kind == tag:
            text = "".join(self.text).strip()
            self.text = None
            if tag == "h2":
                self.sec.title = text.removesuffix("contents").strip()
            elif tag == "h3":
                self.title = text
            elif tag == "p" and "data-quotes" in self.attrs:
                q = json.loads(self.attrs["data-quotes"])
                self.sec.sentences.append(Sentence(text, q["cites"], q["given"], q["defines"]))
            elif tag == "figcaption" and self.sec.figures:
                self.sec.figures[-1] = (text, self.sec.figures[-1][1])
        elif tag in ("td", "th") and self.text is not None:
            text = "".join(self.text).strip()
            self.text = None
            if tag == "th":
                self.header.append(text)
                if "data-uncertainty" in self.attrs:
                    self.header_u[text] = self.attrs["data-uncertainty"]
            elif self.row is not None:
                self.row.append(text)
                u = self.attrs.get("data-resolution-u")
                self.row_u.append(float(u) if u not in (None, "") else None)
        elif tag == "tr" and self.row is not None:
            if self.items and self.row:
                u = self.row_u[1] if len(self.row_u) > 1 else None
                self.sec.items.append(Item(self.row[0], self.row[1], self.row[3], u))
            elif self.table is not None and self.row:
                self.table.rows.append(self.row)
                for c, u in zip(self.header, self.row_u):
                    self.table.resolution_u.setdefault(c, [None] * (len(self.table.rows) - 1)).append(u)
                for c in self.header:
                    col = self.table.resolution_u.setdefault(c, [])
                    col += [None] * (len(self.table.rows) - len(col))
            self.row = None
        elif tag == "table" and self.sec is not None:
            if self.table is not None:
                self.table.columns, self.table.uncertainty = self.header, self.header_u
                self.table.resolution_u = {c: u for c, u in self.table.resolution_u.items()
                                           if any(x is not None for x in u)}
                self.sec.tables.append(self.table)
            self.table, self.items = None, False

    def handle_data(self, data: str) -> None:
        if self.text is not None:
            self.text.append(data)
        if self.sec is not None or self.nav:
            self._flow(data)


def from_html(text: str) -> Document:
    """The document a report's HTML page holds."""
    page = _Page()
    page.feed(text)
    page.close()
    return page.doc


# -- the checks ----------------------------------------------------------------------------------------

def _numeric(text: str) -> bool:
    return re.fullmatch(NUMBER, text.strip()) is not None


def _place(text: str) -> int:
    """The decimal place of a number's last digit: -3 for "1.234", 0 for "12", 2 for "1200" (trailing zeros of a
    whole number are placeholders)."""
    t = text.strip().replace(",", "").lstrip("-−")
    if "." in t:
        return -len(t.split(".")[1])
    return len(t) - len(t.rstrip("0")) if t.strip("0") else 0


def _uncertainty_place(text: str) -> int:
    """The place of an uncertainty's last significant digit, read as :mod:`nicrig.analysis.quantity` writes one
    (two significant digits): "0.0057" -3, "40" 0, "460" 1, "800" 1."""
    t = text.strip().replace(",", "").lstrip("-−")
    if "." in t:
        return -len(t.split(".")[1])
    return max(len(t.lstrip("0")) - 2, 0)


def _significant(text: str) -> int:
    """Significant digits of a number as written ("0.0057": 2, "460": 2, "0.10": 2)."""
    t = text.strip().replace(",", "").lstrip("-−")
    digits = t.replace(".", "").lstrip("0")
    if "." not in t:
        digits = digits.rstrip("0")
    return len(digits)


def _to_float(text: str) -> float:
    return float(text.strip().replace(",", "").replace("−", "-"))


def _gum(where: str, value: str, u: str) -> list[str]:
    """A value and its 95% half-width as printed: the half-width to at most two significant digits, the value to
    its place."""
    if not (_numeric(value) and _numeric(u)) or _to_float(u) == 0:
        return []
    out = []
    if _significant(u) > 2:
        out.append(f"{where}: the uncertainty {u} has more than two significant digits")
    p = _uncertainty_place(u)
    zero = not value.strip().replace(",", "").lstrip("-−").strip("0.")  # 0 is 0 at any place
    if not zero and ("." in value and _place(value) != p or "." not in value and (p < 0 or _place(value) < p)):
        out.append(f"{where}: {value} is not rounded to the place of its uncertainty {u}")
    return out


def _resolved(where: str, u_text: str, resolution_u: float | None) -> list[str]:
    """The printed half-width is at least what the stated resolution gives (rounding to two digits aside)."""
    if resolution_u is None or not _numeric(u_text) or not math.isfinite(resolution_u):
        return []
    least = K95 * resolution_u
    if _to_float(u_text) + 0.5 * 10.0 ** _uncertainty_place(u_text) < least:
        return [f"{where}: the uncertainty {u_text} is below the {least:.3g} the stated resolution gives"]
    return []


def _plain(where: str, value: str) -> list[str]:
    """A decimal with no uncertainty or resolution beside it: at most :data:`MAX_PLAIN_DIGITS` digits."""
    if _numeric(value) and "." in value and _significant(value) > MAX_PLAIN_DIGITS:
        return [f"{where}: {value} has {_significant(value)} significant digits and no uncertainty to justify them"]
    return []


def _numbers(sec: Section) -> list[str]:
    out = []
    for t in sec.tables:
        if t.title == SOURCES_TABLE:
            continue
        col = {c: k for k, c in enumerate(t.columns)}
        for k, row in enumerate(t.rows):
            for c, v in zip(t.columns, row):
                where = f"{sec.title}: {t.title}: {c}, row {k + 1}"
                ures = (t.resolution_u.get(c) or [None] * len(t.rows))[k] if c in t.resolution_u else None
                if c in t.uncertainty and t.uncertainty[c] in col:
                    u = row[col[t.uncertainty[c]]]
                    out += _gum(where, v, u) + _resolved(where, u, ures)
                elif ures is not None and ures > 0 and _numeric(v) and "." in v:
                    finest = math.floor(math.log10(K95 * ures)) - 1  # two significant digits of its half-width
                    if _place(v) < finest:
                        out.append(f"{where}: {v} is finer than its resolution allows (± {K95 * ures:.2g})")
                elif c not in t.uncertainty.values():
                    out += _plain(where, v)
    for i in sec.items:
        where = f"{sec.title}: item {i.label}"
        if " ± " in i.value:
            v, _, rest = i.value.partition(" ± ")
            u = rest.split()[0] if rest.split() else ""
            out += _gum(where, v, u) + _resolved(where, u, i.resolution_u)
        else:
            out += _plain(where, i.value)
    return out


def _quoted(sec: Section, cite: dict[str, str]) -> bool:
    """Whether the cell a sentence quotes prints the text it quotes."""
    text, row = cite["text"], cite.get("row", "")
    if not cite["table"]:
        item = next((i for i in sec.items if i.label == cite["column"]), None)
        return item is not None and text in (item.value, item.value.split(" ± ")[0], item.expected)
    t = next((t for t in sec.tables if t.title == cite["table"]), None)
    if t is None or cite["column"] not in t.columns:
        return False
    k = t.columns.index(cite["column"])
    return any(r[k] == text for r in t.rows if not row or r[0] == row)


def _masked(text: str, spans: list[str]) -> str:
    """``text`` with each span blanked where it stands whole: a quoted "5" leaves the "95" of "95%" alone."""
    for s in sorted((s for s in spans if s), key=len, reverse=True):
        text = re.sub(rf"(?<![\w.]){re.escape(s)}(?!\w|\.\d)", lambda m: " " * len(m.group()), text)
    return text


def _citations_masked(text: str) -> str:
    """``text`` with its parenthesised citations blanked (the figures a paper states: "§4.1.3: 36 and 23 us") and
    the coverage its intervals are stated at ("95% intervals")."""
    text = re.sub(r"\([^()]*(?:et al\.|\b\d{4}\b)[^()]*\)", lambda m: " " * len(m.group()), text)
    return re.sub(r"\b95% (?=intervals?|bars|half-widths?)", "    ", text)


def _sentences(sec: Section) -> list[str]:
    out = []
    for s in sec.sentences:
        for c in s.cites:
            where = f"{sec.title}: sentence \"{s.text[:60]}...\""
            if c["text"] not in s.text:
                out.append(f"{where}: quotes {c['text']!r}, which it does not say")
            elif not _quoted(sec, c):
                out.append(f"{where}: says {c['text']} where {c['table'] or 'the items'} / {c['column']} shows "
                           "otherwise")
        rest = _citations_masked(_masked(s.text, [c["text"] for c in s.cites] + list(s.given)))
        for m in MEASURED.finditer(rest):
            out.append(f"{sec.title}: sentence \"{s.text[:60]}...\" states {m.group()} without quoting a table")
        for m in ANY_NUMBER.finditer(rest):
            out += _plain(f"{sec.title}: sentence \"{s.text[:60]}...\"", m.group())
    return out


def _figures(sec: Section) -> list[str]:
    return [f"{sec.title}: figure {title[:60]!r} has a panel with {min(panels) if panels else 0} mark(s): nothing "
            "to show" for title, panels in sec.figures if not panels or min(panels) < 2]


def _terms(doc: Document) -> list[str]:
    out = []
    for term, pattern in TERMS.items():
        first = next(((text, defines) for text, defines, where in doc.flow
                      if where == "body" and re.search(pattern, text, re.IGNORECASE)), None)
        if first is not None and term not in first[1] and "*" not in first[1]:
            out.append(f"the term {term!r} is first used undefined: \"{first[0][:80]}\"")
    return out


def _citations(doc: Document) -> list[str]:
    body = "\n".join(text for text, _, where in doc.flow if where == "body")
    sources = next((t for s in doc.sections for t in s.tables if t.title == SOURCES_TABLE), None)
    listed = [r[0] for r in sources.rows] if sources is not None else []
    out = [f"a citation without its year: \"...{body[max(m.start() - 40, 0):m.end() + 10]}...\""
           for m in YEARLESS.finditer(body)]
    cited = {name for name in REFERENCES if name in body}
    cited |= {m.group() for m in AUTHOR_YEAR.finditer(body)}
    out += [f"{name} is cited but not listed under {SOURCES_TABLE!r}" for name in sorted(cited - set(listed))]
    out += [f"{name} is listed under {SOURCES_TABLE!r} but never cited" for name in listed if name not in body]
    out += [f"the source documents are named as such: \"{m.group()}\"" for m in SEED_WORDS.finditer(body)]
    return out


def problems(doc: Document) -> list[str]:
    """Every place where the report breaks its rules (none: it keeps them)."""
    out: list[str] = []
    for sec in doc.sections:
        out += _numbers(sec) + _sentences(sec) + _figures(sec)
    return out + _terms(doc) + _citations(doc)


def is_report(text: str) -> bool:
    """Whether ``text`` is a nicrig report, HTML or JSON."""
    head = text.lstrip()[:4000]
    if head.startswith("{"):
        return '"nicrig_version"' in head and '"sections"' in text
    return head.startswith("<!DOCTYPE html>") and '<h1 id="top">' in head and 'class="src">nicrig ' in head


def read(text: str) -> Document:
    """A report's document from its HTML or its JSON."""
    return from_json(text) if text.lstrip().startswith("{") else from_html(text)


def check_file(path: str | Path) -> list[str]:
    """The problems of a report file, HTML or JSON."""
    return problems(read(Path(path).read_text(encoding="utf-8")))


def main(argv: list[str] | None = None) -> int:
    bad = 0
    for name in argv if argv is not None else sys.argv[1:]:
        found = check_file(name)
        for p in found:
            print(f"{name}: {p}")
        bad += len(found)
        if not found:
            print(f"{name}: the report keeps its rules")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
