"""``nicrig events``: print a decoded table (CSV or JSON lines), e.g. the PCI transactions of ``send_pci``.

The notation (hex addresses and ethertypes, ``true``/``false``) and the
``--where`` filters are :mod:`nicrig.decoders.notation`'s.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

EPILOG = """\
Addresses, command_code (C/BE#), ethertype and inner_ethertype print in hex (0x...), as sigrok, PulseView and
Wireshark show them, empty (JSON null) when unknown; other unknown numbers are -1.
Exit status: 0 rows printed; 1 no row matched (a line on stderr says so); 2 error (file, table or column).
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.epilog = EPILOG
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.add_argument("file", type=Path, metavar="FILE.h5")
    p.add_argument("--source", required=True, help="source whose decoded table to print")
    p.add_argument("--decoder", required=True, help="decoder whose table to print (pci, ethernet, irq, ...)")
    p.add_argument("--json", action="store_true", help="one JSON object a line instead of CSV with a header row")
    p.add_argument("--where", action="append", default=[], metavar="COLUMN=VALUE",
                   help="keep rows whose column equals the value (repeatable; numbers in hex or decimal, names "
                        "in any case), e.g. kind=csr, address=0xfd000004, ethertype=0x8808")
    p.add_argument("--limit", type=int, default=None, help="print at most this many rows")


def run(args: argparse.Namespace) -> int:
    from nicrig.acquisition import wire
    from nicrig.acquisition.capture import CaptureSet
    from nicrig.decoders.notation import select, write_rows
    from nicrig.errors import UsageError

    with CaptureSet.open(args.file) as cs:
        if args.source not in wire.names(cs):
            cs.source(args.source)
        path = f"decoded/{args.source}/{args.decoder}"
        if path not in cs.table_names():
            decoded = [t for t in cs.table_names() if t.startswith(f"decoded/{args.source}/")]
            raise UsageError(f"{args.file}: no decoded {args.decoder} table for {args.source!r} "
                             f"(decoded: {', '.join(t.rsplit('/', 1)[1] for t in decoded) or 'none'}; "
                             f"run: nicrig decode {args.file})")
        table = cs.read_table(path)
    rows = select(table, args.where)
    write_rows(rows[: args.limit], args.json, sys.stdout)
    if len(rows):
        return 0
    if not len(table):
        print(f"nicrig: {args.file}: {path} has no rows", file=sys.stderr)
    else:
        print(f"nicrig: {args.file}: none of the {len(table)} rows of {path} matched {' and '.join(args.where)}",
              file=sys.stderr)
    return 1
