"""``nicrig decode``: decode capture sets and store what they find under ``decoded/``.

A stack runs its native kernel where it has one, its sigrok decoders otherwise
(``docs/decoders.md``, "Two layers").
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("files", nargs="+", type=Path, metavar="FILE.h5", help="capture sets to decode")
    p.add_argument("--source", action="append", metavar="NAME",
                   help="decode only this source (repeatable; default: every source whose bus kind is known)")
    p.add_argument("-P", "--protocol-decoders", action="append", dest="stacks", metavar="STACK",
                   help="decoder stack in sigrok-cli syntax, e.g. pci:frame=FRAME#:irdy=IRDY#:trdy=TRDY#:"
                        "devsel=DEVSEL#:ad=AD (a channel may map a whole vector); repeatable; needs --source")
    p.add_argument("--engine", choices=["builtin", "reference", "sigrok"], default="builtin",
                   help="builtin (default): native kernels where a stack has one, the sigrok decoders in "
                        "nicrig's in-process runtime otherwise; reference: the sigrok decoders in-process for "
                        "every stack; sigrok: the sigrok decoders in the real libsigrokdecode through "
                        "sigrok-cli. All three give the same tables")
    p.add_argument("--workers", type=int, default=1, metavar="N",
                   help="decode in N local processes (0: one per CPU; default 1: in this process)")
    p.add_argument("--scheduler", metavar="tcp://HOST:8786",
                   help="decode on a Dask distributed cluster (its workers must see the files at the same paths)")
    p.add_argument("--force", action="store_true",
                   help="decode again tables already decoded by the same decoder versions with the same stack")
    p.add_argument("--chunk-samples", type=int, default=None, metavar="N",
                   help="split sources longer than 2N samples at idle points into chunks of about N "
                        "(default 4194304)")
    p.add_argument("--json", action="store_true", help="print what was decoded as JSON")


def run(args: argparse.Namespace) -> int:
    from nicrig.cpus import usable_cpus
    from nicrig.decoders import batch
    from nicrig.progress import Progress

    from nicrig.errors import UsageError

    if args.workers < 0:
        raise UsageError("--workers must be >= 0")
    workers = args.workers or usable_cpus()

    def report(result: batch.FileResult) -> None:
        if result.error is not None:
            named = result.error.startswith(f"{result.path}:")  # errors from reading the file name it already
            print(f"nicrig: error: {'' if named else result.path + ': '}{result.error}", file=sys.stderr)
        elif not args.json:
            for name in result.written.keys() | result.skipped.keys():
                written, skipped = result.written.get(name, {}), result.skipped.get(name, [])
                if not written and not skipped:
                    print(f"{result.path}: {name}: no decoder for this source (no bus kind or roles recorded; use -P)")
                for output, rows in written.items():
                    print(f"{result.path}: decoded/{name}/{output}: {rows} rows")
                for output in skipped:
                    print(f"{result.path}: decoded/{name}/{output}: up to date (--force decodes again)")

    with Progress() as progress:
        update = progress.task("decode", unit="samples")
        results = batch.decode_files(args.files, sources=args.source, stacks=args.stacks, engine=args.engine,
                                     force=args.force, workers=workers, scheduler=args.scheduler,
                                     chunk_samples=args.chunk_samples or batch.DEFAULT_CHUNK_SAMPLES,
                                     progress=update, on_file=report)
    if args.json:
        print(batch.summary_json(results))
    failed = sum(r.error is not None for r in results)
    if failed and failed == len(results) == 1:
        return 2
    return 1 if failed else 0
