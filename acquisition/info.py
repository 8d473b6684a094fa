"""``nicrig info FILE [--json]``: what a capture set holds.

Prints the file's format and version, its notes, each source (mode, sample
rate or clock, samples, duration, channels and vectors, roles, bus) and the
tables under ``truth/`` and ``decoded/`` (and any other table) with their row
counts and columns (derived tables from the set's companion file
``X.derived.h5``, :mod:`nicrig.companion`), whether every dataset carries a
Fletcher32 checksum, and whether the file's writer closed it.
``--json`` prints the same as one JSON document; each source is
:meth:`nicrig.acquisition.capture.Source.describe`.

Only metadata is read: no samples and no table rows, so a multi-gigabyte
capture set is described at once.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", metavar="FILE", help="capture set or udpmon results file (.h5) to describe")
    parser.add_argument("--json", action="store_true", help="print the description as JSON")


def run(args: argparse.Namespace) -> int:
    from nicrig.h5file import open_any

    with open_any(args.file) as f:
        info = describe(f)
    if args.json:
        json.dump(info, sys.stdout, indent=2, sort_keys=False, default=_jsonable)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(render(info))
    return 0


# -- data ---------------------------------------------------------------------------------------
def describe(cs: Any) -> dict[str, Any]:
    """The description of an open capture set or results file as JSON-ready data."""
    from nicrig.acquisition import wire

    a = cs.attrs
    info = {
        "file": str(cs.path),
        "format": _text(a.get("format", "")),
        "format_version": int(a.get("format_version", 0)),
        "nicrig_version": _text(a.get("nicrig_version", "")),
        "created_utc": _text(a.get("created_utc", "")),
        "notes": cs.notes,
        "sources": [cs.source(name).describe() for name in getattr(cs, "source_names", [])],
        "wire": [wire.WireSource(cs, name).describe() for name in wire.names(cs)],
        "tables": [_table(cs, path) for path in cs.table_names()],
        "checksums": cs.checksum_coverage(),
        "unclosed": cs.unclosed,
        "companion": str(cs.companion_path) if cs.companion_path else None,
        "companion_note": cs.companion_note,
    }
    for key in ("kind", "peer"):
        if key in a:
            info[key] = _text(a[key])
    if "settings" in a:
        info["settings"] = _json_attr(a["settings"])
    return info


def _table(cs: Any, path: str) -> dict[str, Any]:
    info = cs.table_info(path)
    units = _json_attr(info["attrs"].get("units"))
    return {
        "path": path,
        "file": cs.table_location(path),
        "rows": info["rows"],
        "columns": info["columns"],
        "dtypes": info["dtypes"],
        "units": units if isinstance(units, dict) else {},
        "description": _text(info["attrs"].get("description", "")),
    }


def _json_attr(value: Any) -> Any:
    if value is None:
        return {}
    try:
        return json.loads(_text(value))
    except ValueError:
        return {}


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _jsonable(value: Any) -> Any:
    """json.dump fallback for NumPy scalars and arrays found in attributes."""
    if hasattr(value, "tolist"):
        return value.tolist()
    return str(value)


# -- text ---------------------------------------------------------------------------------------
def _hz(hz: float) -> str:
    for scale, unit in ((1e9, "GHz"), (1e6, "MHz"), (1e3, "kHz")):
        if hz >= scale:
            return f"{hz / scale:.6g} {unit}"
    return f"{hz:.6g} Hz"


def _rate(src: dict[str, Any]) -> str:
    rate = src.get("samplerate_hz")
    if src["mode"] == "timing":
        return f"sample rate {_hz(rate)}" if rate else "sample rate ?"
    if rate:
        return f"clock {_hz(rate)} (nominal)"
    n, dur = src["num_samples"], src["duration_ps"]
    if n > 1 and dur > 0:
        return f"clock ~{_hz(1e12 * (n - 1) / dur)} (from timestamps)"
    return "clock ?"


def _bus(bus: dict[str, Any]) -> str:
    if not bus:
        return "-"
    parts = [str(bus.get("kind", "?"))]
    if bus.get("width_bits"):
        parts.append(f"{bus['width_bits']}-bit")
    if bus.get("clock_hz"):
        parts.append(_hz(float(bus["clock_hz"])))
    return " ".join(parts)


def _channels(src: dict[str, Any]) -> list[str]:
    vectors: dict[str, int] = src["vectors"]
    in_vectors = {f"{name}[{i}]" for name, width in vectors.items() for i in range(width)}
    single = [c for c in src["channels"] if c not in in_vectors]
    lines = [f"{src['num_channels']} (unitsize {src['unitsize']} bytes/sample)"]
    if vectors:
        lines.append("vectors  " + ", ".join(f"{name}[{w - 1}:0]" for name, w in vectors.items()))
    if single:
        lines.append("single   " + ", ".join(single))
    return lines


def _checksums(c: dict[str, Any]) -> str:
    if not c["unchecked"]:
        return "Fletcher32 on every dataset (nicrig verify FILE reads them all)"
    return (f"none on {len(c['unchecked'])} of {c['datasets']} datasets (written before nicrig checksummed its "
            "data): damage in them can read as other values")


def render(info: dict[str, Any]) -> str:
    """The human-readable description."""
    out = [f"{info['file']}"]
    out.append(f"  format   {info['format']} version {info['format_version']}"
               + (f", written by nicrig {info['nicrig_version']}" if info["nicrig_version"] else "")
               + (f" on {info['created_utc']}" if info["created_utc"] else ""))
    if info["notes"]:
        out.append(f"  notes    {info['notes']}")
    out.append(f"  checksum {_checksums(info['checksums'])}")
    if info["unclosed"]:
        out.append("  NOT CLOSED by its writer (killed, or still writing): it holds what was flushed before")
    if info["companion"]:
        out.append(f"  derived  {info['companion']} (decoded tables, GUI session)")
    if info["companion_note"]:
        out.append(f"  derived  {info['companion_note']}")
    if "kind" in info:
        out.append(f"  run      udpmon {info['kind']} against {info.get('peer', '?')}")
    out.append("")
    if info["format"] == "nicrig-capture-set":
        out.append(f"sources ({len(info['sources'])})")
    for src in info["sources"]:
        out.append(f"  {src['name']}")
        out.append(f"    mode      {src['mode']}, {_rate(src)}")
        out.append(f"    samples   {src['num_samples']}, {src['duration_ps'] / 1e6:.3f} us"
                   f" (trigger at sample {src['trigger_sample']}, offset {src['offset_ps']} ps)")
        if src["short"]:
            out.append(f"    SHORT     {src['num_samples']} of the {src['samples_expected']} samples its instrument "
                       "announced: the acquisition was killed or cut short")
        chan = _channels(src)
        out.append(f"    channels  {chan[0]}")
        out.extend(f"              {line}" for line in chan[1:])
        roles = ", ".join(f"{k}={v}" for k, v in src["roles"].items()) or "-"
        out.append(f"    roles     {roles}")
        out.append(f"    bus       {_bus(src['bus'])}")
        if src["notes"]:
            out.append(f"    notes     {src['notes']}")
    if info["wire"]:
        from nicrig.acquisition.wire_import import wire_lines

        out.append(f"wire sources ({len(info['wire'])})")
        for w in info["wire"]:
            first, *rest = wire_lines(w)
            out += [f"  {first}", *(f"    {line}" for line in rest)]
    out.append("")
    out.append(f"tables ({len(info['tables'])})")
    if not info["tables"]:
        out.append("  (none)")
    for t in info["tables"]:
        cols = ", ".join(f"{c} [{t['units'][c]}]" if c in t["units"] else c for c in t["columns"])
        where = f"  (in {t['file']})" if info["companion"] and t["file"] != Path(info["file"]).name else ""
        out.append(f"  {t['path']}  {t['rows']} rows{where}")
        out.append(f"    columns   {cols}")
        if t["description"]:
            out.append(f"    about     {t['description']}")
    return "\n".join(out) + "\n"
