"""``nicrig export SET.h5 --source S -o FILE.sr|FILE.vcd``: a source for PulseView, sigrok-cli or GTKWave.

``.sr`` (sigrok session, :func:`nicrig.acquisition.srzip.write_sr`) holds uniformly spaced
samples: a state-mode source is written at its nominal clock rate. ``.vcd``
(:func:`nicrig.acquisition.vcd.write_vcd`) keeps the exact times (ps, common timeline)
and vectors as multi-bit wires, and reads back into nicrig exactly. ``--channels``
picks channels by name, vector name or shell-style glob. ``--pulseview`` adds a PulseView
session setup ``FILE.pvs`` (:mod:`nicrig.acquisition.pulseview`) with the decoder stacks
:func:`nicrig.decoders.spec.auto_stacks` picks, so PulseView opens the ``.sr`` decoded.
Files are written under a temporary name and renamed into place when complete, with
ordinary permissions (:mod:`nicrig.atomic`). ``--json`` prints what was written (every file with
its path, format and counts) as one JSON document. See ``docs/import-export.md``.
"""

from __future__ import annotations

import argparse
import difflib
import fnmatch
import json
import shlex
import sys
from pathlib import Path
from typing import Any

#: PulseView draws at most this many logic channels of a session file.
PULSEVIEW_MAX_CHANNELS = 64


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", metavar="SET.h5", help="capture set (or, for pcap/pcapng, udpmon results file) to export "
                                                  "from")
    p.add_argument("--source", metavar="NAME", help="source to export (default: the set's only source)")
    p.add_argument("-o", "--output", required=True, metavar="FILE",
                   help="file to write: .sr or .vcd (logic samples), .pcapng or .pcap (the frames of a wire source or "
                        "of a decoded GMII source)")
    p.add_argument("--format", choices=["sr", "vcd", "pcapng", "pcap"],
                   help="output format (default: from the extension)")
    p.add_argument("--resolution", choices=["ns", "us"],
                   help="pcap/pcapng: time stamps in nanoseconds or microseconds (default: a wire source's own "
                        "resolution, as it was captured; ns for a GMII source)")
    p.add_argument("--channels", metavar="LIST",
                   help="comma-separated channel names, vector names (AD = all its bits) or globs ('AD[[]1*', "
                        "'*#'); default: all, always in the source's order")
    p.add_argument("--split-vectors", action="store_true",
                   help="VCD: write each bit as its own 1-bit wire (AD[0], AD[1]...) for sigrok-cli/PulseView, "
                        "whose VCD input stops at the first multi-bit value")
    p.add_argument("--strict", action="store_true",
                   help=f"refuse a .sr with more than {PULSEVIEW_MAX_CHANNELS} channels instead of warning")
    p.add_argument("--pulseview", action="store_true",
                   help="with a .sr, also write a PulseView session setup FILE.pvs beside it: the decoder stacks "
                        "`nicrig decode` picks from the source's roles, channels mapped; `pulseview FILE.sr` "
                        "then opens decoded")
    p.add_argument("--json", action="store_true",
                   help="print what was written as one JSON document (files with their paths, formats, sample "
                        "and channel counts; notes; sigrok-cli pcap lines) instead of the text")


def select_channels(source: Any, spec: str | None) -> list[str]:
    """The channels ``spec`` names, in the source's order; an item matching nothing is a UsageError."""
    from nicrig.errors import UsageError

    if spec is None:
        return list(source.channels)
    chans, vectors = list(source.channels), dict(source.vectors)
    chosen: set[str] = set()
    for item in (s.strip() for s in spec.split(",")):
        if not item:
            continue
        if item in chans:
            chosen.add(item)
        elif item in vectors:
            chosen.update(vectors[item])
        else:
            hits = fnmatch.filter(chans, item)
            for v in fnmatch.filter(vectors, item):
                hits += vectors[v]
            if not hits:
                close = difflib.get_close_matches(item, chans + list(vectors), n=6, cutoff=0.5)
                hint = f"; close names: {', '.join(close)}" if close else \
                    f"; channels: {', '.join(chans[:12])}{', ...' if len(chans) > 12 else ''}"
                raise UsageError(f"source {source.name!r}: --channels item {item!r} matches nothing{hint}")
            chosen.update(hits)
    if not chosen:
        raise UsageError("--channels selects no channel")
    return [c for c in chans if c in chosen]


def _pick_source(cs: Any, name: str | None) -> Any:
    from nicrig.errors import UsageError

    if name is None:
        names = cs.source_names
        if len(names) != 1:
            raise UsageError(f"{cs.path} has {len(names)} sources ({', '.join(names) or 'none'}): "
                             "give --source NAME")
        name = names[0]
    return cs.source(name)


def run(args: argparse.Namespace) -> int:
    from nicrig.acquisition.capture import CaptureSet
    from nicrig.progress import Progress

    from nicrig.errors import UsageError

    out = Path(args.output)
    fmt = args.format or {".sr": "sr", ".vcd": "vcd", ".pcapng": "pcapng", ".pcap": "pcap"}.get(out.suffix.lower())
    if fmt is None:
        raise UsageError(f"{out}: unknown extension {out.suffix!r}: use .sr, .vcd, .pcapng or .pcap (or --format)")
    folder = out.parent if str(out.parent) else Path(".")
    if not folder.is_dir():
        raise UsageError(f"{out}: folder {folder} does not exist")
    if fmt in ("pcapng", "pcap"):
        return _export_frames(args, out, fmt)
    if args.resolution:
        raise UsageError("--resolution applies to pcap and pcapng output only")
    if fmt == "sr" and args.split_vectors:
        raise UsageError("--split-vectors applies to VCD output only")
    if fmt == "vcd" and args.pulseview:
        raise UsageError("--pulseview writes a .sr and its PulseView setup: give -o FILE.sr")
    summary: dict[str, Any] = {"file": str(args.file), "source": None, "written": [], "notes": [],
                               "pcap_commands": []}
    with CaptureSet.open(args.file) as cs:
        src = _pick_source(cs, args.source)
        chans = select_channels(src, args.channels)
        if src.num_samples == 0:
            raise UsageError(f"source {src.name!r} has no samples to export")
        summary["source"] = src.name
        with Progress() as bar:
            progress = bar.task(f"export: writing {out.name}", src.num_samples, "samples")
            if fmt == "sr":
                stacks = _stacks_with_pcap_start(src, sample0_epoch(str(cs.attrs.get("created_utc", "")),
                                                                    int(src.times_ps(0, 1)[0])))
                signals = _pulseview_signals(src, stacks, chans, summary["notes"]) if args.pulseview else None
                summary["written"].append(_export_sr(src, chans, out, args.strict or args.pulseview, progress,
                                                     summary["notes"]))
                if signals is not None:
                    summary["written"].append(_write_pulseview_setup(out, signals, src.vectors))
                summary["pcap_commands"] = _pcap_commands(out, stacks, chans)
            else:
                from nicrig.acquisition.vcd import write_vcd

                written = write_vcd(out, src, chans, split_vectors=args.split_vectors, progress=progress)
                summary["written"].append({"path": written.pop("path"), "format": "vcd", **written,
                                           "channel_names": chans})
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        print("\n".join(_text(summary)))
    return 0


def _export_frames(args: argparse.Namespace, out: Path, fmt: str) -> int:
    """pcap or pcapng of a wire source or a decoded GMII source (:mod:`nicrig.acquisition.wire_export`)."""
    from nicrig.acquisition import wire, wire_export
    from nicrig.errors import UsageError
    from nicrig.h5file import open_any
    from nicrig.progress import Progress

    given = [o for o, v in (("--channels", args.channels), ("--split-vectors", args.split_vectors),
                            ("--pulseview", args.pulseview)) if v]
    if given:
        raise UsageError(f"{', '.join(given)} apply to .sr and .vcd output only")
    with open_any(args.file) as f:
        names = wire.names(f) + list(getattr(f, "source_names", []))
        name = args.source
        if name is None:
            if len(names) != 1:
                raise UsageError(f"{args.file} has {len(names)} sources ({', '.join(names) or 'none'}): give --source")
            name = names[0]
        if name not in names:
            raise UsageError(f"{args.file}: no source {name!r} (sources: {', '.join(names) or 'none'})")
        with Progress() as bar:
            summary = wire_export.export(f, name, out, fmt, args.resolution,
                                         bar.task(f"export: writing {out.name}", unit="frames"))
    if args.json:
        print(json.dumps({"file": str(args.file), "source": name, "written": [summary], "notes": [],
                          "pcap_commands": []}, indent=2))
    else:
        print("\n".join(wire_export.text(summary)))
    return 0


def _text(summary: dict[str, Any]) -> list[str]:
    """The lines ``nicrig export`` prints for ``summary`` (what :func:`run` wrote) without ``--json``."""
    source = summary["source"]
    lines = [f"  note: {n}" for n in summary["notes"]]
    for w in summary["written"]:
        if w["format"] == "sr":
            lines.append(f"wrote {w['path']}: source {source!r}, {w['samples']:,} samples, {w['channels']} "
                         f"channels at {w['samplerate_hz'] / 1e6:g} MHz")
        elif w["format"] == "pvs":
            lines += _pvs_text(w)
        else:
            lines += _vcd_text(source, w)
    return lines + [f"  pcap of the {p['direction'] or 'decoded'} frames, stamped with the capture's time: "
                    f"{p['command']}" for p in summary["pcap_commands"]]


def _vcd_text(source: str, s: dict[str, Any]) -> list[str]:
    out = Path(s["path"])
    vec = ", ".join(f"{k}[{w}]" for k, w in s["vectors"].items())
    lines = [f"wrote {out}: source {source!r}, {s['samples']:,} samples, {s['channels']} channels "
             f"as {s['variables']} variables" + (f" (vectors {vec})" if vec else "")
             + f", {s['changes']:,} value changes; VCD time 0 is {s['time_origin_ps']} ps on the set's timeline"]
    if s["vectors"]:
        lines.append("  note: sigrok-cli and PulseView skip multi-bit wires in a VCD: for them use a .sr, "
                     "or --split-vectors")
    if s["clock"]:
        lines.append(f"  note: state-mode source: clock wire {s['clock']} rises at each sample; "
                     f"re-import with: nicrig import {out.name} --clock {s['clock']} (automatic for nicrig)")
    if s["renamed"]:
        shown = ", ".join(f"{o!r} as {r}" for r, o in list(s["renamed"].items())[:6])
        lines.append(f"  note: renamed for VCD: {shown} (nicrig's import restores the names)")
    return lines


def _export_sr(src: Any, chans: list[str], out: Path, strict: bool, progress: Any,
               notes: list[str]) -> dict[str, Any]:
    """Write ``chans`` of ``src`` as the sigrok session ``out``; its summary. Notes for the user go to ``notes``."""
    import numpy as np
    from nicrig.acquisition.capture import pack_bits, unpack_bits
    from nicrig.acquisition.srzip import write_sr
    from nicrig.acquisition.vcd import nominal_rate

    from nicrig.atomic import replacing
    from nicrig.errors import UsageError

    if len(chans) > PULSEVIEW_MAX_CHANNELS:
        msg = (f"{out.name} would have {len(chans)} logic channels; PulseView draws at most "
               f"{PULSEVIEW_MAX_CHANNELS}: pick some with --channels (e.g. --channels 'FRAME#,IRDY#,TRDY#,AD')")
        if strict:
            raise UsageError(msg + " (PulseView could not open it)")
        print(f"nicrig: warning: {msg}", file=sys.stderr)
    if src.mode == "state":
        rate = nominal_rate(src)
        notes.append(f"state-mode source written at its nominal clock rate {rate / 1e6:g} MHz: in the .sr the "
                     "sample spacing becomes uniform (the exact timestamps are kept only by a VCD export)")
    else:
        rate = float(src.samplerate_hz)
    subset = chans != list(src.channels)
    cols = np.array([src.channel_index(c) for c in chans], dtype=np.intp)
    nsrc = len(src.channels)
    n = src.num_samples

    def blocks():  # type: ignore[no-untyped-def]
        for b0, packed in src.iter_packed(block=1 << 20):
            yield pack_bits(unpack_bits(packed, nsrc)[:, cols]) if subset else packed
            progress(b0 + len(packed), n)

    with replacing(out) as tmp:
        total = write_sr(tmp, chans, rate, blocks())
    return {"path": str(out), "format": "sr", "samples": int(total), "channels": len(chans),
            "samplerate_hz": float(rate), "channel_names": chans}


def sample0_epoch(created_utc: str, t0_ps: int) -> str | None:
    """When sample 0 was taken, as decimal seconds since 1970-01-01 UTC to the ns; None without a creation time.

    A capture set records its creation time (``created_utc``, ISO 8601, to the second)
    and each sample's time on the set's timeline (``t0_ps`` for sample 0): the sample's
    wall-clock time is their sum. This is what the ethernet decoder's ``pcap_start``
    takes, so that pcap timestamps are the capture's own time, not 1970.
    """
    from datetime import datetime

    try:
        created = datetime.fromisoformat(created_utc)
    except ValueError:
        return None
    if created.tzinfo is None:
        return None
    ns = int(created.timestamp()) * 10 ** 9 + t0_ps // 1000
    return f"{ns // 10 ** 9}.{ns % 10 ** 9:09d}"


def _stacks_with_pcap_start(src: Any, epoch: str | None) -> list[Any]:
    """The source's decoder stacks, each ``ethernet`` decoder told the wall-clock time of sample 0."""
    from nicrig.decoders.spec import auto_stacks

    stacks = auto_stacks(src)
    if epoch is not None:
        for call in (c for st in stacks for c in st.calls if c.id == "ethernet"):
            call.options["pcap_start"] = epoch
    return stacks


def pcap_command(sr: Path, stack: str, pcap: Path) -> str:
    """The shell line with which sigrok-cli runs ``stack`` (``-P`` syntax) on ``sr`` and writes its ethernet
    frames to ``pcap``, every word quoted for the shell where it needs it (a path with a space)."""
    words = ["sigrok-cli", "-i", str(sr), "-P", stack, "-B", "ethernet=pcap"]
    return f"{shlex.join(words)} > {shlex.quote(str(pcap))}"


def _pcap_commands(sr: Path, stacks: list[Any], chans: list[str]) -> list[dict[str, str]]:
    """Per Ethernet stack the export has all channels of: its ``direction`` ("" when it has none), the pcap
    file and the sigrok-cli line that writes its frames there with the capture's times."""
    have = set(chans)
    out = []
    for st in stacks:
        if st.output != "ethernet" or not set(st.calls[0].channels.values()) <= have:
            continue
        direction = st.calls[0].options.get("direction", "")
        pcap = sr.with_name(f"{sr.stem}-{direction}.pcap" if direction else f"{sr.stem}.pcap")
        out.append({"direction": direction, "pcap": str(pcap), "command": pcap_command(sr, st.text(), pcap)})
    return out


def _pulseview_signals(src: Any, stacks: list[Any], chans: list[str], notes: list[str]) -> list[Any]:
    """The decode signals of the ``.pvs`` for ``chans`` of ``src`` (why a stack is left out goes to ``notes``);
    a source nicrig knows no stack for is an error."""
    from nicrig.acquisition.pulseview import decode_signals

    from nicrig.errors import UsageError

    if not stacks:
        raise UsageError(f"--pulseview: source {src.name!r} records no bus kind or protocol roles, so nicrig knows "
                         "no decoders for it (import it with conventional channel names, or add decoders in "
                         "PulseView by hand)")
    signals, left_out = decode_signals(stacks, chans)
    if not signals:
        raise UsageError(f"--pulseview: no decoder of source {src.name!r} has all its required channels "
                         f"({'; '.join(left_out)})")
    notes += left_out
    return signals


def _write_pulseview_setup(sr: Path, signals: list[Any], vectors: dict[str, list[str]]) -> dict[str, Any]:
    """Write the PulseView session setup beside ``sr``; its summary."""
    from nicrig.acquisition.pulseview import setup_text, vector_bits_shown_as_values
    from nicrig.decoders import catalog

    from nicrig.atomic import replacing

    pvs = sr.with_suffix(".pvs")
    hidden = vector_bits_shown_as_values(signals, vectors)
    with replacing(pvs) as tmp:
        tmp.write_text(setup_text(signals, hidden), encoding="ascii")
    ids = sorted({c.id for s in signals for c in s.stack.calls})
    found = catalog.sigrok_finds(ids)
    return {"path": str(pvs), "format": "pvs", "data": str(sr),
            "decoders": [{"name": s.name, "channels_mapped": len(s.stack.calls[0].channels)} for s in signals],
            "decoder_ids": ids, "hidden_bits": len(hidden), "decoders_found_in": str(found) if found else None,
            "decoders_dir": str(catalog.DECODERS_DIR)}


def _pvs_text(w: dict[str, Any]) -> list[str]:
    pvs, sr = Path(w["path"]), Path(w["data"])
    stacks = "; ".join(f"{d['name']} ({d['channels_mapped']} of its channels mapped)" for d in w["decoders"])
    lines = [f"wrote {pvs}: PulseView session setup, decoders {stacks}"]
    if w["hidden_bits"]:
        lines.append(f"  {w['hidden_bits']} bits of vectors the decoders show as values start hidden (PulseView's "
                     "channel menu shows them)")
    shown, shown_pvs = shlex.quote(str(sr)), shlex.quote(str(pvs))
    lines.append(f"  open with: pulseview {shown}   (PulseView reads {pvs.name} beside it; or: pulseview -s "
                 f"{shown_pvs} {shown})")
    if w["decoders_found_in"] is None:
        lines.append(f"  PulseView needs nicrig's decoders ({', '.join(w['decoder_ids'])}): run 'nicrig decoders "
                     f"install' once, or start it as SIGROKDECODE_DIR={shlex.quote(w['decoders_dir'])} "
                     f"pulseview {shown}")
    else:
        lines.append(f"  PulseView finds nicrig's decoders in {w['decoders_found_in']}")
    return lines
