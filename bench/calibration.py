#!/usr/bin/env python3
"""The simulated rig against Hughes-Jones et al. 2003: every figure it can produce, paper's value, measured, error.

Runs every configuration of Hughes-Jones et al. 2003 through the commands a user runs
(``nicrig simulate``, ``nicrig decode``, ``nicrig report --json``), reads each
row from the report, and prints the table docs/simulator.md holds
(``--json`` for data; ``--reduced`` for short runs; ``--only`` for some
configurations). Exit status 1 when a row is beyond 10% without the paper's
own disagreeing numbers, or when fewer than 90% of the rows are within 5%.
"""

from __future__ import annotations

import argparse
import json
import math
import sys

from nicrig.acquisition.sim.calibration import CONFIGS, LIMIT, REDUCED, TOLERANCE, Row, Sizes, calibrate, summary
from nicrig.analysis.quantity import measured

#: The share of rows that must be within :data:`TOLERANCE`.
WITHIN_TOLERANCE_SHARE = 0.9


def table(rows: list[Row]) -> str:
    """The rows as a Markdown table."""
    out = ["| configuration | quantity (source) | published | measured ± 95% | error | |",
           "|---|---|---|---|---|---|"]
    for r in rows:
        seed = f"{r.seed:g}" if r.seed_high is None else f"{r.seed:g}-{r.seed_high:g}"
        err = f"{r.error:+.1%}" if math.isfinite(r.error) else "-"
        verdict = ("within 5%" if r.within == TOLERANCE else "within 10%" if r.within == LIMIT
                   else r.note or "**beyond 10%**")
        out.append(f"| {r.config} | {r.quantity} ({r.source}) | {seed} {r.unit} | {measured(r.measured, r.ci95)} "
                   f"| {err} | {verdict} |")
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reduced", action="store_true", help="short runs")
    ap.add_argument("--only", nargs="+", choices=sorted(CONFIGS), help="these configurations only")
    ap.add_argument("--jobs", type=int, default=2, help="runs at a time (default 2)")
    ap.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = ap.parse_args()
    sizes = REDUCED if args.reduced else Sizes()

    from rich.progress import Progress

    with Progress(transient=True, disable=not sys.stderr.isatty()) as bar:
        task = bar.add_task("calibrating", total=None)

        def progress(done: int, total: int, what: str) -> None:
            bar.update(task, completed=done, total=total, description=what)

        rows = calibrate(sizes, only=set(args.only) if args.only else None, jobs=args.jobs, progress=progress)
    s = summary(rows)
    if args.json:
        print(json.dumps({"rows": [r.as_dict() for r in rows], "summary": s}, indent=2))
    else:
        print(table(rows))
        print(f"\n{s['within_5pct']} of {s['rows']} rows within 5%, {s['within_10pct']} within 10%; beyond 10%: "
              f"{s['beyond_explained']} where the paper's own numbers disagree, {s['beyond_unexplained']} not")
    ok = s["beyond_unexplained"] == 0 and s["within_5pct"] >= WITHIN_TOLERANCE_SHARE * s["rows"]
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
