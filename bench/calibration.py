#!/usr/bin/env python3
"""The simulated rig against Hughes-Jones et al. 2003: every covered figure, published value, simulated value, error.

Simulates every configuration of Hughes-Jones et al. 2003 (all four boards, each NIC measured
on them), decodes the captures with nicrig's decoders and measures them with
nicrig's analyses (no ground truth read), then prints the table
(``--json`` for data; ``--reduced`` for short runs). Paste the table into
docs/simulator.md. Exit status 1 when a covered row is out of tolerance.
"""

from __future__ import annotations

import argparse
import json
import math
import sys

from nicrig.acquisition.sim.calibration import CONFIGS, E1000_SOFTIRQ, REDUCED, Row, Sizes, calibrate


def _fmt(v: float) -> str:
    if not math.isfinite(v):
        return "-"
    return f"{v:.4g}"


def table(rows: list[Row]) -> str:
    """The rows as a Markdown table."""
    out = ["| configuration | quantity (source) | published | simulated | error | |",
           "|---|---|---|---|---|---|"]
    for r in rows:
        err = f"{r.error:+.1%}" if math.isfinite(r.error) else "-"
        verdict = r.note if r.note else ("ok" if r.ok else f"**outside {r.tolerance:.0%}**")
        out.append(f"| {r.config} | {r.quantity} ({r.source}) | {_fmt(r.seed)} {r.unit} | {_fmt(r.measured)} | "
                   f"{err} | {verdict} |")
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reduced", action="store_true", help="short runs (as the test does)")
    ap.add_argument("--only", nargs="+", choices=sorted(CONFIGS), help="these configurations only")
    ap.add_argument("--json", action="store_true", help="print the rows as JSON")
    ap.add_argument("--intel-softirq", action="store_true",
                    help="what-if: the Intel PRO/1000 with Linux 2.4's receive path (rx_refill = softirq: the stack "
                         "after the service, the ring refilled from a tasklet)")
    args = ap.parse_args()
    sizes = REDUCED if args.reduced else Sizes()

    from rich.progress import Progress

    with Progress(transient=True, disable=not sys.stderr.isatty()) as bar:
        task = bar.add_task("calibrating", total=None)

        def progress(done: int, total: int, what: str) -> None:
            bar.update(task, completed=done, total=total, description=what)

        rows = calibrate(sizes, only=set(args.only) if args.only else None, progress=progress,
                         nic_changes={"intel-pro1000": E1000_SOFTIRQ} if args.intel_softirq else None)
    if args.json:
        print(json.dumps([r.as_dict() for r in rows], indent=2))
    else:
        print(table(rows))
        covered = [r for r in rows if r.covered]
        print(f"\n{sum(r.ok for r in covered)} of {len(covered)} covered rows within tolerance; "
              f"{len(rows) - len(covered)} explained")
    return 0 if all(r.ok for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
