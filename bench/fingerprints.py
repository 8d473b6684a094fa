"""The oracle of the speed benchmarks (``bench/model.py``, ``bench/render.py``): each case's fingerprint (a hash
of everything it produced) kept in a JSON file by ``--save FILE`` and compared with a later run's by
``--expect FILE``, so that a change meant only to make something faster shows it changed nothing."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--no-hash", action="store_true", help="no fingerprint (under Valgrind: count the work only)")
    ap.add_argument("--save", type=Path, metavar="FILE",
                    help="keep the fingerprints in FILE (JSON; those of other cases already there stay)")
    ap.add_argument("--expect", type=Path, metavar="FILE", help="compare the fingerprints with FILE's; exit 1 if any differ")


class Oracle:
    """Compares fingerprints with ``--expect``'s file and keeps them for ``--save``'s."""

    def __init__(self, ap: argparse.ArgumentParser, args: argparse.Namespace):
        if args.no_hash and (args.save or args.expect):
            ap.error("--save and --expect need the fingerprints (no --no-hash)")
        self.save, self.expect = args.save, args.expect
        self.expected = json.loads(args.expect.read_text()) if args.expect else {}
        self.results: dict[str, str | None] = {}
        self.differ: list[str] = []

    def verdict(self, key: str, fingerprint: str | None) -> str:
        """"same" or "DIFFERS" against the expected fingerprint of ``key``; "" when there is none."""
        self.results[key] = fingerprint
        if key not in self.expected:
            return ""
        if self.expected[key] == fingerprint:
            return "same"
        self.differ.append(key)
        return "DIFFERS"

    def close(self) -> int:
        """Save the fingerprints; the exit status: 1 if any differed from those expected."""
        if self.save:
            kept = json.loads(self.save.read_text()) if self.save.exists() else {}
            self.save.write_text(json.dumps({**kept, **self.results}, indent=1) + "\n")
        if self.differ:
            print(f"fingerprints differ from {self.expect}: {', '.join(self.differ)}", file=sys.stderr)
            return 1
        return 0
