"""The one command line: ``nicrig <subcommand> ...``.

Each subcommand lives beside the code it drives and exposes two functions,
``add_arguments(parser)`` and ``run(args) -> int``; this module only wires
them up, so ``nicrig --help`` stays fast (modules are imported on use).
Errors a user can fix print one line ``nicrig: error: ...`` and exit with
the error's code (2); an interrupted command exits 130.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from nicrig import __version__
from nicrig.errors import NicrigError

# name -> (module, one-line help)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "simulate": ("nicrig.acquisition.sim.command", "simulate the rig into a capture set (.h5)"),
    "info": ("nicrig.acquisition.info", "describe a capture set: sources, channels, tables"),
    "import": ("nicrig.acquisition.importing", "import a VCD, sigrok .sr, CSV, listing (ILA, Saleae, DSView) or pcap/pcapng into a capture set"),
    "verify": ("nicrig.verify", "read every chunk of capture sets or results files and report any damage"),
    "export": ("nicrig.acquisition.exporting", "export a source of a capture set to .sr or VCD, or its frames to pcapng or pcap"),
    "decode": ("nicrig.decoders.decode", "decode capture sets into decoded/ tables (native kernels, the sigrok decoders as reference)"),
    "events": ("nicrig.decoders.events", "print a decoded table (transactions, frames, interrupts)"),
    "decoders": ("nicrig.decoders.catalog", "list nicrig's sigrok decoders or install them for PulseView"),
    "udpmon": ("nicrig.udpmon.command",
               "UDPmon-style traffic between hosts: serve, latency, stream, suite, aggregate"),
    "report": ("nicrig.analysis.command", "analyse results and decoded capture sets into an HTML/JSON/CSV report"),
    "acquire": ("nicrig.acquisition.acquire", "arm instruments (PyVISA, sigrok), fetch their records into a capture set"),
    "instrument": ("nicrig.acquisition.instrument_command", "simulated SCPI instrument, drivers, queries, deskew"),
    "trace": ("nicrig.acquisition.hostprobe.command",
              "host probe: record this host's kernel trace events (IRQs, softirqs, NAPI, skb, syscalls)"),
    "gui": ("nicrig.gui.command", "desktop GUI: all sources on one timeline, decoded lanes, cursors, results"),
}


def chosen_command(argv: Sequence[str]) -> str | None:
    """The subcommand ``argv`` names (its first word that is not an option), if it is one of ours."""
    word = next((token for token in argv if not token.startswith("-")), None)
    return word if word in SUBCOMMANDS else None


def build_parser(command: str | None) -> argparse.ArgumentParser:
    """The parser, with the options of ``command`` only: importing every subcommand's module (SciPy, Qt,
    the simulator) cost seconds on every run, ``nicrig --help`` included."""
    parser = argparse.ArgumentParser(
        prog="nicrig",
        description="Hardware-in-the-loop PCI/link analysis rig: traffic, capture, decode, explain.",
    )
    parser.add_argument("--version", action="version", version=f"nicrig {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module, help_text) in SUBCOMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.set_defaults(_module=module)
        if name == command:
            importlib.import_module(module).add_arguments(p)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(chosen_command(argv))
    args = parser.parse_args(argv)
    # The arguments as given, for files that record the command line: called in-process (a test, a script),
    # sys.argv is the calling program's, not this command's.
    args._argv = argv
    if args.command is None:
        parser.print_help()
        return 2
    try:
        return int(importlib.import_module(args._module).run(args) or 0)
    except NicrigError as exc:
        print(f"nicrig: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("nicrig: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (nicrig events ... | head): stop quietly, as Unix tools do.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def program() -> NoReturn:
    """``nicrig`` as a program (the console script, ``python -m nicrig``): :func:`main`, then exit without
    freeing what the command built. The interpreter's last collection would free it object by object: after
    an 18,000-frame ``nicrig simulate`` 1.65 M objects in reference cycles (the model's hosts, buses and
    their transactions), 2.3-2.5 s of a ~5 s run, for memory the operating system takes back at once.
    Frozen (``gc.freeze``), that collection passes them by: 0.1 s. Files are closed and ``atexit``
    handlers run as before; in-process callers of :func:`main` keep the usual collection."""
    code = main()
    gc.freeze()
    sys.exit(code)
