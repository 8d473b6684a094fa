"""User-facing text names its sources as a reader can find them (issue 15, point 5): no command's --help
says a bare "seed 002"; it says "Hughes-Jones et al. 2003, §4.2.3" (analysis/citations.py)."""

from __future__ import annotations

import argparse
import re

from nicrig.cli import SUBCOMMANDS, build_parser

BARE_SEED = re.compile(r"\bseeds? ?0\d\d\b", re.IGNORECASE)


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
