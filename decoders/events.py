"""``nicrig events``: print a decoded table (CSV or JSON lines), e.g. the PCI transactions of ``send_pci``."""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path
from typing import Any


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", type=Path, metavar="FILE.h5")
    p.add_argument("--source", required=True, help="source whose decoded table to print")
    p.add_argument("--decoder", required=True, help="decoder whose table to print (pci, ethernet, irq, ...)")
    p.add_argument("--format", choices=["csv", "json"], default="csv",
                   help="csv (header row, default) or json (one object a line)")
    p.add_argument("--where", action="append", default=[], metavar="COLUMN=VALUE",
                   help="keep rows whose column equals the value (repeatable), e.g. kind=dma")
    p.add_argument("--limit", type=int, default=None, help="print at most this many rows")


def _plain(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value.item() if hasattr(value, "item") else value


def run(args: argparse.Namespace) -> int:
    import numpy as np
    from nicrig.acquisition.capture import CaptureSet

    from nicrig.errors import UsageError

    with CaptureSet.open(args.file) as cs:
        cs.source(args.source)
        path = f"decoded/{args.source}/{args.decoder}"
        if path not in cs.table_names():
            decoded = [t for t in cs.table_names() if t.startswith(f"decoded/{args.source}/")]
            raise UsageError(f"{args.file}: no decoded {args.decoder} table for {args.source!r} "
                             f"(decoded: {', '.join(t.rsplit('/', 1)[1] for t in decoded) or 'none'}; "
                             f"run: nicrig decode {args.file})")
        table = cs.read_table(path)
    keep = np.ones(len(table), dtype=bool)
    for cond in args.where:
        column, sep, value = cond.partition("=")
        if not sep or column not in table.dtype.names:
            raise UsageError(f"--where {cond!r}: use COLUMN=VALUE with a column of {', '.join(table.dtype.names)}")
        col = table[column]
        keep &= (col == value.encode()) if col.dtype.kind == "S" else (col.astype(str) == value)
    rows = table[keep][: args.limit]
    names = list(table.dtype.names)
    if args.format == "json":
        for row in rows:
            print(json.dumps({n: _plain(row[n]) for n in names}))
    else:
        out = csv.writer(sys.stdout, lineterminator="\n")
        out.writerow(names)
        for row in rows:
            out.writerow([_plain(row[n]) for n in names])
    return 0
