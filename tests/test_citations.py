"""User-facing text names its sources as a reader can find them: no command's --help
says a bare "seed 002"; it says "Hughes-Jones et al. 2003, §4.2.3" (analysis/citations.py)."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from nicrig.analysis.citations import REFERENCES
from nicrig.cli import SUBCOMMANDS, build_parser

#: "seed 002", also broken over two lines of a document (``seed\n002``), as a reflowed paragraph leaves it.
BARE_SEED = re.compile(r"\bseeds?\s*0\d\d\b", re.IGNORECASE)


def _helps(parser: argparse.ArgumentParser, path: str = "nicrig"):
    yield path, parser.format_help()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _helps(sub, f"{path} {name}")


def test_no_help_text_cites_a_bare_seed_number() -> None:
    helps = {path: text for command in SUBCOMMANDS for path, text in _helps(build_parser(command))
             if path == "nicrig" or path.split()[1] == command}
    assert len(helps) > len(SUBCOMMANDS) and "--rtt-intercept-us" in helps["nicrig report"]
    bare = {path: BARE_SEED.findall(text) for path, text in helps.items() if BARE_SEED.search(text)}
    assert not bare, f"--help cites bare seed numbers: {bare}"


ROOT = Path(__file__).resolve().parents[1]


def _user_documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "data").rglob("*.toml"))]


def test_no_document_cites_a_bare_seed_number() -> None:
    bare = {str(p.relative_to(ROOT)): BARE_SEED.findall(p.read_text()) for p in _user_documents()
            if BARE_SEED.search(p.read_text())}
    assert not bare, f"documents cite bare seed numbers: {bare}"


def test_the_docs_references_page_is_the_one_list() -> None:
    """docs/references.md lists exactly the entries the report ends with, in the same words."""
    page = (ROOT / "docs" / "references.md").read_text()
    entries = dict(re.findall(r"^- \*\*(.+?)\*\*: (.+)$", page, re.MULTILINE))
    assert entries == REFERENCES


#: "the seed" as the name of a paper (quoted, it is named as a word, as the report lint's description does); a
#: random-number seed is allowed where its line, or the one before, says so.
PAPER_SEED = re.compile(r'(?<!")\bthe seed\b(?!")|\bseed value\b', re.IGNORECASE)
RANDOM_WORDS = ("random", "rng", "drawn", "draws", "order")


def _product_texts() -> list[Path]:
    """What a user of the product reads besides the analysis: its code's docstrings, messages and --help, the
    benchmarks' output, the Makefile's echo lines, the documents."""
    code = [p for folder in ("udpmon", "acquisition", "gui", "decoders", "nicrig", "bench")
            for p in sorted((ROOT / folder).rglob("*.py"))]
    return [*code, ROOT / "Makefile", *_user_documents()]


def test_the_product_cites_papers_by_author_and_year() -> None:
    bare, named = {}, {}
    for path in _product_texts():
        lines = path.read_text().splitlines()
        text = "\n".join(lines)
        where = str(path.relative_to(ROOT))
        hyphenated = re.findall(r"\bseed-0\d\d\b", text, re.IGNORECASE)
        if BARE_SEED.search(text) or hyphenated:
            bare[where] = BARE_SEED.findall(text) + hyphenated
        said = [line.strip() for k, line in enumerate(lines) if PAPER_SEED.search(line)
                and not any(w in f"{lines[k - 1] if k else ''} {line}".lower() for w in RANDOM_WORDS)]
        if said:
            named[where] = said
    assert not bare, f"bare seed numbers: {bare}"
    assert not named, f"a paper called 'the seed': {named}"
