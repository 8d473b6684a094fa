"""``nicrig decode``: run the sigrok decoders on capture sets and store what they find under ``decoded/``."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("files", nargs="+", type=Path, metavar="FILE.h5", help="capture sets to decode")
    p.add_argument("--source", action="append", metavar="NAME",
                   help="decode only this source (repeatable; default: every source whose bus kind is known)")
    p.add_argument("-P", "--protocol-decoders", action="append", dest="stacks", metavar="STACK",
                   help="decoder stack in sigrok-cli syntax, e.g. pci:frame=FRAME#:irdy=IRDY#:trdy=TRDY#:"
                        "devsel=DEVSEL#:ad=AD (a channel may map a whole vector); repeatable; needs --source")
    p.add_argument("--engine", choices=["sigrok"], default="sigrok",
                   help="sigrok: the real libsigrokdecode through sigrok-cli")
    p.add_argument("--json", action="store_true", help="print what was decoded as JSON")


def _decode_source(cs: Any, name: str, stack_texts: list[str] | None, progress: Any) -> dict[str, int]:
    from nicrig.decoders import catalog, sigrok_cli, spec, tables

    source = cs.source(name)
    stacks = [spec.parse_stack(t, source) for t in stack_texts] if stack_texts else spec.auto_stacks(source)
    by_output: dict[str, list[spec.Stack]] = {}
    for stack in stacks:
        by_output.setdefault(stack.output, []).append(stack)
    written = {}
    for output, group in by_output.items():
        records: list[dict[str, Any]] = []
        for stack in group:
            records += sigrok_cli.run_stack(source, stack, progress)
        table = tables.records_to_table(output, records, source)
        versions = {c.id: catalog.get(c.id).version for s in group for c in s.calls}
        cs.write_table(f"decoded/{name}/{output}", table, units=tables.UNITS,
                       description=f"{output} decoder records for source {name}",
                       attrs=tables.table_attrs([s.text() for s in group], sigrok_cli.version(), versions))
        written[output] = len(table)
    return written


def run(args: argparse.Namespace) -> int:
    from nicrig.acquisition.capture import CaptureSet

    from nicrig.errors import NicrigError, UsageError

    if args.stacks and not args.source:
        raise UsageError("-P needs --source: say which source the channel names belong to")
    results: dict[str, Any] = {}
    failed = 0
    bar = None
    if sys.stderr.isatty():
        from rich.progress import Progress

        bar = Progress(transient=True)
        bar.start()
    try:
        for path in args.files:
            try:
                with CaptureSet.open(path, "r+") as cs:
                    names = args.source or cs.source_names
                    done: dict[str, Any] = {}
                    for name in names:
                        progress = None
                        if bar is not None:
                            task = bar.add_task(f"{path.name}:{name}", total=cs.source(name).num_samples)
                            progress = lambda n, total, task=task: bar.update(task, completed=n)  # noqa: E731
                        done[name] = _decode_source(cs, name, args.stacks, progress)
                    results[str(path)] = done
            except NicrigError as exc:
                if len(args.files) == 1:
                    raise
                print(f"nicrig: error: {exc}", file=sys.stderr)
                results[str(path)] = {"error": str(exc)}
                failed += 1
    finally:
        if bar is not None:
            bar.stop()
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        for path, done in results.items():
            if "error" in done:
                continue
            for name, tables_written in done.items():
                if not tables_written:
                    print(f"{path}: {name}: no decoder for this source (no bus kind or roles recorded; use -P)")
                for output, rows in tables_written.items():
                    print(f"{path}: decoded/{name}/{output}: {rows} rows")
    return 1 if failed else 0
