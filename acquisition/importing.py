"""``nicrig import FILE -o SET.h5``: bring a VCD, sigrok session (.sr), CSV or listing capture into a capture set.

The file becomes one source (``--source``, default: the source name a VCD exported by
nicrig records, else the file's stem) of a new capture
set, or of an existing one with ``--append``. Samples are streamed a block at a time, so
a multi-gigabyte VCD never sits in memory expanded. Channel names that follow nicrig's
conventions (``FRAME#``, ``frame_n``, ``AD[31:0]``, ``C/BE#``, ``TX_EN``, ``RXD``...) give the
source its roles and ``bus.kind`` (``pci`` or ``gmii``), so decoders find their channels.
A ``.csv`` that is a logic-analyzer or FPGA listing (Vivado ILA, Saleae Logic 2, DSView) is
recognised by its content and read by :mod:`~nicrig.acquisition.listing`.
``--json`` prints the new source as ``nicrig info --json`` describes it. See ``docs/import-export.md``.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

from nicrig.acquisition.listing_formats import TITLES as LISTING_TITLES
from nicrig.acquisition.listing_formats import choose as choose_listing

_FORMATS = {".vcd": "vcd", ".sr": "sr", ".csv": "csv", ".txt": "csv", ".pcap": "pcap", ".pcapng": "pcapng"}

#: Normalized channel name -> role. Names are normalized by dropping an active-low mark
#: ('#', '_n', '_l', '_b') and separators, in upper case: 'C/BE#' and 'c_be_n' are both 'CBE'.
PCI_ROLES = {
    "FRAME": "frame", "IRDY": "irdy", "TRDY": "trdy", "DEVSEL": "devsel", "STOP": "stop",
    "AD": "ad", "CBE": "cbe", "PAR": "par", "PAR64": "par64", "PERR": "perr", "REQ64": "req64", "ACK64": "ack64",
    "GNT": "gnt", "REQ": "req", "INTA": "inta", "CLK": "clk", "PCICLK": "clk",
}
GMII_ROLES = {"TXEN": "tx_en", "TXER": "tx_er", "TXD": "txd", "RXDV": "rx_dv", "RXER": "rx_er", "RXD": "rxd",
              "GTXCLK": "tx_clk", "TXCLK": "tx_clk", "RXCLK": "rx_clk"}
#: Roles played by a vector (all its bits), the others by one channel.
VECTOR_ROLES = {"ad", "cbe", "txd", "rxd"}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", metavar="FILE",
                   help="capture to import: .vcd, .sr (sigrok session), .csv (sigrok-style CSV, or a Vivado ILA, "
                        "Saleae Logic 2 or DSView listing, recognised by its content), or a packet capture "
                        ".pcap/.pcapng (a wire source)")
    p.add_argument("-o", "--output", required=True, metavar="SET.h5", help="capture set to write (or extend)")
    p.add_argument("--source", metavar="NAME",
                   help="name of the new source (default: the name recorded by nicrig's VCD export, else the "
                        "file's stem)")
    p.add_argument("--append", action="store_true", help="add the source to an existing capture set")
    p.add_argument("--force", action="store_true",
                   help="replace SET.h5 if it exists (without --append; it is not replaced without)")
    p.add_argument("--format", choices=["vcd", "sr", "csv", *LISTING_TITLES, "pcap", "pcapng"],
                   help="input format (default: from the extension, and for .csv/.txt from the content: "
                        + ", ".join(f"{k} = {v}" for k, v in LISTING_TITLES.items()) + "; csv = sigrok-style)")
    p.add_argument("--sample-rate", metavar="HZ",
                   help="timing-mode sample rate, e.g. 400e6 or 66.67MHz (CSV: needed without a time column "
                        "or '; Samplerate:' comment; VCD: default derived from the change times); for an ILA "
                        "listing, the clock the ILA samples on (its rows have no times)")
    p.add_argument("--window", type=int, metavar="K",
                   help="ILA listing: import capture window K (0, 1, ...) of a capture with several windows")
    g = p.add_argument_group("VCD input")
    g.add_argument("--clock", metavar="SIGNAL",
                   help="state mode: one sample per rising edge of SIGNAL, values as they stood just before it")
    g.add_argument("--scope", metavar="PATH", help="import only the variables under this scope (e.g. top.send)")
    g.add_argument("--x-as", choices=["0", "1", "hold"], default=None,
                   help="value stored for x (unknown) bits: 0, 1 or hold the previous value (default 0); also "
                        "for listings' X (no data)")
    g.add_argument("--z-as", choices=["0", "1", "hold"], default=None,
                   help="value stored for z (floating) bits (default 1: PCI and GMII control lines are pulled up)")
    from nicrig.acquisition import wire_import

    wire_import.add_arguments(p)
    p.add_argument("--json", action="store_true",
                   help="print what was written as one JSON document (the input file and format, the capture "
                        "set, whether appended, the new source as `nicrig info --json` describes it: mode, rate, "
                        "sample and channel counts, roles, bus, instrument, notes) instead of the text")


# -- names, roles, bus ------------------------------------------------------------------------------
def source_name_from(path: Path) -> str:
    """A valid source name from a file name: 'run 7.vcd' -> 'run_7', '2x.sr' -> '_2x'."""
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", path.stem) or "imported"
    return name if re.match(r"[A-Za-z_]", name) else "_" + name


def _normalize(name: str) -> str:
    u = name.rsplit(".", 1)[-1].upper()
    for suffix in ("#", "_N", "_L", "_B"):
        if u.endswith(suffix) and len(u) > len(suffix):
            u = u[: -len(suffix)]
            break
    return re.sub(r"[^A-Z0-9]", "", u)


def guess_roles(channels: list[str]) -> tuple[dict[str, str], str | None, list[str]]:
    """Roles (``{"frame": "FRAME#", "ad": "AD"}``) from channel names, the bus kind, and notes."""
    from nicrig.acquisition.capture import vectors_from_names

    vectors = vectors_from_names(channels)
    in_vector = {c for bits in vectors.values() for c in bits}
    candidates: dict[str, list[str]] = {}
    table = {**PCI_ROLES, **GMII_ROLES}
    for name in list(vectors) + [c for c in channels if c not in in_vector]:
        role = table.get(_normalize(name))
        if role is None or ((role in VECTOR_ROLES) != (name in vectors)):
            continue
        candidates.setdefault(role, []).append(name)
    roles, notes = {}, []
    for role, names in candidates.items():
        if len(names) == 1:
            roles[role] = names[0]
        else:
            notes.append(f"role {role!r} left unset: {', '.join(names)} all fit (import one with --scope?)")
    pci = "frame" in roles and ("irdy" in roles or "trdy" in roles)
    gmii = ("tx_en" in roles and "txd" in roles) or ("rx_dv" in roles and "rxd" in roles)
    kind = "pci" if pci and not gmii else "gmii" if gmii and not pci else None
    if pci and gmii:
        notes.append("both PCI and GMII signals: bus.kind left unset")
    return roles, kind, notes


def sanitize_channels(names: list[str]) -> tuple[list[str], list[str]]:
    """Make ``NAME[k]`` groups valid vectors (bits 0..n-1): shift a contiguous range, flatten one with gaps."""
    pat = re.compile(r"^(?P<name>.+)\[(?P<bit>\d+)\]$")
    groups: dict[str, list[int]] = {}
    for n in names:
        m = pat.match(n)
        if m:
            groups.setdefault(m["name"], []).append(int(m["bit"]))
    rename: dict[str, str] = {}
    notes = []
    for base, bits in groups.items():
        b = sorted(bits)
        if b == list(range(len(b))):
            continue
        if b[-1] - b[0] == len(b) - 1:
            rename.update({f"{base}[{k}]": f"{base}[{k - b[0]}]" for k in b})
            notes.append(f"{base}[{b[-1]}:{b[0]}] imported as {base}[{len(b) - 1}:0]")
        else:
            rename.update({f"{base}[{k}]": f"{base}_{k}" for k in b})
            notes.append(f"{base} has gaps in its bit numbers: imported as single channels {base}_<k>")
    return [rename.get(n, n) for n in names], notes


# -- the command ------------------------------------------------------------------------------------
def run(args: argparse.Namespace) -> int:
    from nicrig.acquisition.capture import CaptureSet, SourceSpec, vectors_from_names
    from nicrig.acquisition.csv_logic import parse_rate
    from nicrig.atomic import refuse_existing
    from nicrig.progress import Progress

    from nicrig.errors import FormatError, UsageError

    path = Path(args.file)
    if not path.exists():
        raise UsageError(f"{path}: no such file")
    if path.is_dir():
        raise UsageError(f"{path}: is a folder")
    fmt = args.format or _FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise UsageError(f"{path}: unknown extension {path.suffix!r}: give --format vcd, sr, csv, pcap or pcapng")
    out = Path(args.output)
    if args.append and args.force:
        raise UsageError("--append adds to SET.h5 and --force replaces it: give one of them")
    if not args.append and not args.force:
        refuse_existing(out)  # before reading the file: a typo costs no import
    packets = [o for o, v in (("--stamp-clock", args.stamp_clock), ("--time-origin", args.time_origin)) if v is not None]
    if fmt in ("pcap", "pcapng"):
        from nicrig.acquisition import wire_import

        others = [o for o, v in (("--sample-rate", args.sample_rate), ("--window", args.window), ("--clock", args.clock),
                                 ("--scope", args.scope), ("--x-as", args.x_as), ("--z-as", args.z_as)) if v is not None]
        if others:
            raise UsageError(f"{', '.join(others)} do not apply to pcap and pcapng input")
        return wire_import.run(args, path, fmt)
    if packets:
        raise UsageError(f"{', '.join(packets)} apply to pcap and pcapng input only")
    layout = None
    if fmt in ("csv", *LISTING_TITLES):
        fmt, layout = choose_listing(path, fmt, explicit=args.format is not None)
    if fmt != "vcd":
        given = [o for o, v in (("--clock", args.clock), ("--scope", args.scope), ("--z-as", args.z_as))
                 + ((("--x-as", args.x_as),) if fmt not in LISTING_TITLES else ()) if v is not None]
        if given:
            raise UsageError(f"{', '.join(given)} apply to VCD input only")
    rate = parse_rate(args.sample_rate) if args.sample_rate is not None else None
    if args.clock and rate is not None:
        raise UsageError("--clock (state mode) and --sample-rate (timing mode) exclude each other")
    with Progress() as bar:
        progress = bar.task(f"import: reading {path.name}", unit="bytes")
        reader, instrument = _reader(fmt, path, args, rate, progress, layout)
        exported = (getattr(reader, "meta", None) or {}).get("source") if getattr(reader, "restored", False) else None
        name = _source_name(args.source or exported or source_name_from(path), out, args.append)
        blocks = reader.blocks()
        try:
            first = next(blocks, None)  # errors in the file surface here, before anything is written
        except FormatError as exc:
            if fmt == "csv" and args.format is None:
                raise FormatError(f"{exc} (read as sigrok-style CSV: not recognised as a "
                                  + ", ".join(LISTING_TITLES.values()) + ")") from None
            raise
        if first is None:
            raise FormatError(f"{path}: no samples")
        channels, rename_notes = sanitize_channels(list(reader.channels))
        restored = getattr(reader, "restored", False)
        meta = getattr(reader, "meta", None) or {}
        if restored:
            known = set(channels) | set(vectors_from_names(channels))
            roles = {r: t for r, t in (meta.get("roles") or {}).items() if t in known}
            bus = dict(meta.get("bus") or {})
            role_notes: list[str] = []
        else:
            roles, kind, role_notes = guess_roles(channels)
            bus = {"kind": kind} if kind else {}
            if kind == "pci" and "ad" in roles:
                bus["width_bits"] = len(vectors_from_names(channels)[roles["ad"]])
            if kind and reader.mode == "state" and reader.samplerate_hz:
                bus["clock_hz"] = reader.samplerate_hz
        spec = SourceSpec(name=name, channels=channels, mode=reader.mode, samplerate_hz=reader.samplerate_hz,
                          trigger_sample=reader.trigger_sample, offset_ps=reader.offset_ps, bus=bus,
                          roles=roles, instrument=instrument, notes="")
        spec.validate()
        if args.append:
            cs = CaptureSet.amend(out)  # a copy, replacing the set only once the import is complete
        else:
            cs = CaptureSet.create(out, notes=f"imported from {path.name}", overwrite=args.force)
        with cs:  # an error abandons the new file or the copy: an existing set stays as it was
            w = cs.add_source(spec)
            w.append(*first)
            for packed, stamps in blocks:
                w.append(packed, stamps)
            notes = reader.summary_notes() + rename_notes + role_notes
            instrument.update(_stats(reader))
            # the notes and counts are known only now
            w.set_notes("; ".join(notes))
            w.set_instrument(instrument)
            if (reader.trigger_sample, reader.offset_ps) != (spec.trigger_sample, spec.offset_ps):
                w.set_trigger(reader.trigger_sample)  # a listing's trigger row may come after the first block
                w.set_offset(reader.offset_ps)
            summary = w.describe()
    if args.json:
        print(json.dumps({"file": str(path), "format": fmt, "output": str(out), "appended": bool(args.append),
                          "source": summary}, indent=2))
    else:
        _report(path, out, summary, notes)
    return 0


def _source_name(name: str, out: Path, append: bool) -> str:
    """``name`` checked as a new source's name (of ``out`` when appending); errors say to give ``--source``."""
    from nicrig.acquisition.capture import CaptureSet

    from nicrig.errors import UsageError

    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.-]*", name):
        raise UsageError(f"source name {name!r}: use letters, digits, '_', '.', '-' (give --source NAME)")
    if append:
        with CaptureSet.open(out) as cs:
            if name in cs.source_names:
                raise UsageError(f"{out}: already has a source {name!r}: give another --source NAME")
    return name


def _reader(fmt: str, path: Path, args: argparse.Namespace, rate: float | None, progress: Any,
            layout: Any = None) -> tuple[Any, dict]:
    instrument: dict[str, Any] = {"model": "import", "file": path.name, "format": fmt}
    if layout is not None:
        from nicrig.acquisition.listing import ListingReader

        x_as = args.x_as or "0"
        instrument.update(x_as=x_as, window=args.window)
        return ListingReader(path, layout, sample_rate_hz=rate, x_as=x_as, window=args.window,
                             progress=progress), instrument
    if args.window is not None:
        from nicrig.errors import UsageError

        raise UsageError("--window applies to ILA listings only")
    if fmt == "vcd":
        from nicrig.acquisition.vcd import VcdReader

        x_as, z_as = args.x_as or "0", args.z_as or "1"
        reader = VcdReader(path, clock=args.clock, sample_rate_hz=rate, x_as=x_as, z_as=z_as, scope=args.scope,
                           progress=progress)
        instrument.update(timescale=reader.header.timescale_text, clock=reader.clock, x_as=x_as, z_as=z_as,
                          scope=args.scope)
        if reader.restored:
            instrument["exported_source"] = reader.meta.get("source")
        return reader, instrument
    if fmt == "csv":
        from nicrig.acquisition.csv_logic import CsvReader

        return CsvReader(path, sample_rate_hz=rate, progress=progress), instrument
    return _SrReader(path, rate), instrument


def _stats(reader: Any) -> dict[str, Any]:
    s = getattr(reader, "stats", {})
    return {k: s[k] for k in ("x_samples", "z_samples") if k in s}


class _SrReader:
    """A sigrok session file as a timing-mode source, its samples streamed from the archive a block at a time."""

    mode = "timing"
    trigger_sample = 0
    offset_ps = 0

    def __init__(self, path: Path, rate: float | None):
        from nicrig.acquisition.srzip import open_sr

        from nicrig.errors import UsageError

        self.path = path
        self.session = open_sr(path)
        self.channels = list(self.session.channels)
        self.samplerate_hz = rate or self.session.samplerate_hz
        if not self.samplerate_hz:
            raise UsageError(f"{path}: the session file has no sample rate: give --sample-rate HZ")
        self.notes = [f"imported from {path.name} (sigrok session)"]
        if rate and self.session.samplerate_hz and rate != self.session.samplerate_hz:
            self.notes.append(f"sample rate {rate:g} Hz given instead of the file's {self.session.samplerate_hz:g}")

    def blocks(self):  # type: ignore[no-untyped-def]
        for block in self.session.blocks():
            yield block, None

    def summary_notes(self) -> list[str]:
        return self.notes


def _report(path: Path, out: Path, d: dict[str, Any], notes: list[str]) -> None:
    if d["mode"] == "state":
        how = f"state mode ({d['samplerate_hz'] / 1e6:g} MHz nominal)" if d["samplerate_hz"] else "state mode"
    else:
        how = f"timing mode at {d['samplerate_hz'] / 1e6:g} MHz"
    vec = ", ".join(f"{k}[{v}]" for k, v in d["vectors"].items())
    print(f"imported {path} -> {out}: source {d['name']!r}, {how}, {d['num_samples']:,} samples, "
          f"{d['num_channels']} channels" + (f" (vectors {vec})" if vec else ""))
    if d["bus"].get("kind"):
        print(f"  bus {d['bus']['kind']}; roles " + ", ".join(f"{r}={t}" for r, t in d["roles"].items()))
    elif d["roles"]:
        print("  roles " + ", ".join(f"{r}={t}" for r, t in d["roles"].items()))
    for n in notes[1:]:
        print(f"  note: {n}")
