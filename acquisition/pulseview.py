"""PulseView session setups (``.pvs``): decoder stacks and channel maps that PulseView restores with a ``.sr``.

PulseView 0.4.2 opens ``X.sr`` and then, when it exists, the setup file ``X.pvs`` beside it
(``pulseview -s SETUP X.sr`` names another one); a setup given without a data file is
ignored. A setup is a Qt ``QSettings`` INI file. For each decode signal it holds the
decoder stack (bottom first), each decoder's options that differ from their defaults
as a serialized GLib ``GVariant`` of the option's type, and the channel map: the decode
signal's channels numbered over the whole stack, each decoder's required channels then
its optional ones, each naming the logic channel (by the ``.sr``'s channel name) that
feeds it. (PulseView 0.4.2 ``pv/session.cpp`` ``Session::load_file`` and
``restore_setup``, ``pv/data/decodesignal.cpp`` ``DecodeSignal::restore_settings``.)
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from nicrig.decoders import catalog
from nicrig.decoders.spec import Stack

#: libsigrokdecode's SRD_INITIAL_PIN_SAME_AS_SAMPLE0: a channel's value before sample 0 is its
#: value at sample 0, so the first sample makes no edge. PulseView reads a missing entry as 0 (low).
INITIAL_PIN_SAME_AS_SAMPLE0 = 2

_HEX_DIGITS = frozenset("0123456789abcdefABCDEF")


def gvariant(value: Any, default: Any) -> tuple[str, bytes]:
    """``(type string, serialized bytes)`` of ``value`` as a GVariant of ``default``'s type.

    libsigrokdecode types an option by its default (Python str -> ``s``, int -> ``x``,
    float -> ``d``) and refuses a value of another type. Serialization (GVariant
    specification, "Serialisation"): a string is its UTF-8 bytes and a NUL, ``x`` and
    ``d`` are 8 bytes in the machine's byte order (what ``g_variant_get_data`` gives).
    """
    if isinstance(default, bool) or not isinstance(default, (int, float)):
        return "s", str(value).encode("utf-8") + b"\0"
    if isinstance(default, int):
        return "x", struct.pack("=q", int(value, 0) if isinstance(value, str) else int(value))
    return "d", struct.pack("=d", float(value))


def ini_value(text: str) -> str:
    """``text`` escaped as QSettings writes an INI value (Qt 5 ``QSettingsPrivate::iniEscapedString``).

    ``"`` and ``\\`` get a backslash; control and non-ASCII characters become ``\\xHH``,
    and a hex digit right after such an escape is escaped too, since the reader would
    take it as part of the number. A value holding ``;``, ``,`` or ``=`` is quoted
    (unquoted, ``,`` would split it into a list and ``;`` start a comment).
    """
    out: list[str] = []
    after_hex = False
    for ch in text:
        code = ord(ch)
        if after_hex and ch in _HEX_DIGITS:
            out.append(f"\\x{code:x}")
            continue
        after_hex = False
        if ch in '"\\':
            out.append("\\" + ch)
        elif code < 0x20 or code >= 0x7F:
            out.append(f"\\x{code:x}")
            after_hex = True
        else:
            out.append(ch)
    body = "".join(out)
    return f'"{body}"' if any(c in text for c in ";,=") else body


def ini_bytes(data: bytes) -> str:
    """A ``QByteArray`` value as QSettings writes it: ``@ByteArray(...)``, escaped as :func:`ini_value`."""
    return ini_value("@ByteArray(" + data.decode("latin-1") + ")")


@dataclass(frozen=True)
class DecodeSignal:
    """One PulseView decode signal: a stack with the channel map restricted to the exported channels."""

    name: str
    stack: Stack


def decode_signals(stacks: Iterable[Stack], exported: Sequence[str]) -> tuple[list[DecodeSignal], list[str]]:
    """The stacks PulseView can run on ``exported`` channels, and a note for each one it cannot.

    A decoder's optional channel that was not exported is left unconnected, as in
    sigrok-cli; a stack whose first decoder lacks a required channel is left out.
    """
    have = set(exported)
    signals: list[DecodeSignal] = []
    notes: list[str] = []
    for stack in stacks:
        first = stack.calls[0]
        info = catalog.get(first.id)
        unrecorded = [c for c in info.channels if c not in first.channels]
        unexported = [first.channels[c] for c in info.channels if c in first.channels and first.channels[c] not in have]
        if unrecorded or unexported:
            why = [f"the source records no channel for {', '.join(unrecorded)}"] if unrecorded else []
            why += [f"channel(s) {', '.join(unexported)} not exported"] if unexported else []
            notes.append(f"no {first.id} decoder in the PulseView setup: {'; '.join(why)}")
            continue
        calls = [type(c)(c.id, {k: v for k, v in c.channels.items() if v in have}, dict(c.options))
                 for c in stack.calls]
        direction = first.options.get("direction")
        name = "/".join(catalog.get(c.id).name for c in calls) + (f" {direction}" if direction else "")
        signals.append(DecodeSignal(name, Stack(calls)))
    return signals, notes


def vector_bits_shown_as_values(signals: Sequence[DecodeSignal], vectors: dict[str, list[str]]) -> list[str]:
    """The bits of each vector that some decoder maps whole (AD, C/BE#, TXD...): it shows their value."""
    mapped = {name for sig in signals for call in sig.stack.calls for name in call.channels.values()}
    return [bit for bits in vectors.values() if set(bits) <= mapped for bit in bits]


def ini_key(path: str) -> tuple[str, str]:
    """``(section, key)`` under which QSettings stores settings key ``path`` (groups joined by ``/``).

    The first group is the INI section (``General`` for a key outside any group), the rest
    is the key with ``\\`` between groups; characters other than letters, digits, ``_``,
    ``-`` and ``.`` become ``%XX`` (Qt 5 ``QSettingsPrivate::iniEscapedKey``). A channel
    named ``C/BE#[0]`` is therefore the group ``C`` holding ``BE#[0]``, as in PulseView.
    """
    def escape(part: str) -> str:
        return "".join(c if c.isascii() and (c.isalnum() or c in "_-.") else
                       (f"%{ord(c):02X}" if ord(c) <= 0xFF else f"%U{ord(c):04X}") for c in part)

    head, sep, rest = path.partition("/")
    if not sep:
        return "General", escape(head)
    section = escape(head)
    return ("%General" if section == "General" else section), "\\".join(escape(p) for p in rest.split("/"))


def setup_text(signals: Sequence[DecodeSignal], hidden: Sequence[str] = ()) -> str:
    """The ``.pvs`` INI text that makes PulseView add ``signals`` with their options and channel maps.

    The logic channels named in ``hidden`` start hidden (PulseView's ``enabled=false``): the
    bits of a vector a decoder shows as values. They still feed the decoders; PulseView's
    channel menu shows them again.
    """
    settings: list[tuple[str, str]] = [("decode_signals", str(len(signals))), ("meta_objs", "0"), ("views", "0")]
    settings += [(f"{name}/enabled", "false") for name in hidden]
    for n, sig in enumerate(signals):
        group = f"decode_signal{n}/"
        keys: list[tuple[str, str]] = [("name", ini_value(sig.name)), ("enabled", "true"),
                                       ("decoders", str(len(sig.stack.calls)))]
        channel_id = 0
        for d, call in enumerate(sig.stack.calls):
            info = catalog.get(call.id)
            keys += [(f"decoder{d}/id", ini_value(call.id)), (f"decoder{d}/visible", "true")]
            options = {k: v for k, v in call.options.items() if k in info.options}
            keys.append((f"decoder{d}/options", str(len(options))))
            for i, (key, value) in enumerate(options.items()):
                vtype, data = gvariant(value, info.options[key])
                keys += [(f"decoder{d}/option{i}/name", ini_value(key)),
                         (f"decoder{d}/option{i}/type", vtype),
                         (f"decoder{d}/option{i}/value", ini_bytes(data))]
            for pd_channel in info.all_channels:
                prefix = f"channel{channel_id}/"
                keys += [(prefix + "name", ini_value(pd_channel)),
                         (prefix + "initial_pin_state", str(INITIAL_PIN_SAME_AS_SAMPLE0))]
                if pd_channel in call.channels:
                    keys.append((prefix + "assigned_signal_name", ini_value(call.channels[pd_channel])))
                channel_id += 1
        keys.append(("channels", str(channel_id)))
        settings += [(group + k, v) for k, v in keys]
    sections: dict[str, list[str]] = {}
    for path, value in settings:
        section, key = ini_key(path)
        sections.setdefault(section, []).append(f"{key}={value}")
    return "\n".join(f"[{section}]\n" + "\n".join(lines) + "\n" for section, lines in sections.items())
