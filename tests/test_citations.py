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
