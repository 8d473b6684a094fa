"""Decoder stacks: sigrok-cli's ``-P`` syntax, vector channel maps, and stacks chosen from a source's roles.

A stack is what sigrok-cli's ``-P`` takes: decoders separated by commas, the
first reading logic channels, each next one stacked on the one before;
``id:key=value:...`` sets a decoder's channels (to channel names of the
source) and options. nicrig adds one thing: a channel key may map a whole
vector, ``ad=AD`` meaning ``ad0=AD[0]:ad1=AD[1]:...``.

Without ``-P``, :func:`auto_stacks` picks the stacks from the bus kind and
roles a capture set records for each source (``docs/formats.md``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from nicrig.acquisition.capture import Source
from nicrig.decoders import catalog

from nicrig.errors import UsageError

#: Which binary output of a stack's last decoder holds its machine-readable records.
RECORDS = "records"


@dataclass
class DecoderCall:
    """One decoder of a stack with its channel map (decoder channel id -> source channel) and options."""

    id: str
    channels: dict[str, str] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)

    def text(self) -> str:
        """This decoder in ``-P`` syntax, with the source's channel names."""
        parts = [self.id] + [f"{k}={v}" for k, v in self.channels.items()]
        parts += [f"{k}={v}" for k, v in self.options.items()]
        return ":".join(parts)


@dataclass
class Stack:
    """Decoders stacked bottom-up; the last one's ``records`` output becomes the table."""

    calls: list[DecoderCall]

    @property
    def output(self) -> str:
        return self.calls[-1].id

    def text(self) -> str:
        return ",".join(c.text() for c in self.calls)


def _map_channel(info: catalog.DecoderInfo, key: str, value: str, source: Source) -> dict[str, str]:
    if key in info.all_channels:
        if value not in source.channels:
            raise UsageError(f"{info.id}: channel {key}={value}: source {source.name!r} has no channel {value!r}")
        return {key: value}
    if f"{key}0" in info.all_channels:
        if value not in source.vectors:
            raise UsageError(f"{info.id}: {key}={value} maps a vector, but source {source.name!r} has no vector "
                             f"{value!r} (vectors: {', '.join(source.vectors) or 'none'})")
        bits = source.vectors[value]
        width = sum(1 for c in info.all_channels if c.startswith(key) and c[len(key):].isdigit())
        if len(bits) > width:
            raise UsageError(f"{info.id}: vector {value} has {len(bits)} bits, {key} takes at most {width}")
        return {f"{key}{i}": bit for i, bit in enumerate(bits)}
    raise KeyError(key)


def parse_stack(text: str, source: Source) -> Stack:
    """Parse one ``-P`` stack (sigrok-cli syntax plus vector maps) against ``source``'s channels."""
    calls = []
    for part in text.split(","):
        if not part.strip():
            raise UsageError(f"-P {text!r}: empty decoder between commas")
        did, *pairs = part.strip().split(":")
        info = catalog.get(did)
        call = DecoderCall(did)
        for pair in pairs:
            key, sep, value = pair.partition("=")
            if not sep or not key:
                raise UsageError(f"-P {did}: {pair!r} is not key=value")
            if key in info.options:
                call.options[key] = value
                continue
            try:
                call.channels.update(_map_channel(info, key, value, source))
            except KeyError:
                raise UsageError(f"{did} has no channel or option {key!r} (channels: "
                                 f"{', '.join(_channel_groups(info))}; options: {', '.join(info.options) or 'none'})"
                                 ) from None
        if not calls and "logic" not in info.inputs:
            raise UsageError(f"{did} stacks on {', '.join(info.inputs)}: put a logic decoder first")
        if calls and calls[-1].id not in info.inputs and not set(info.inputs) & set(catalog.get(calls[-1].id).outputs):
            raise UsageError(f"{did} cannot stack on {calls[-1].id} (it takes {', '.join(info.inputs)})")
        missing = [c for c in info.channels if c not in call.channels]
        if missing and not calls:
            raise UsageError(f"{did}: required channel(s) {', '.join(missing)} not mapped")
        calls.append(call)
    if RECORDS not in catalog.get(calls[-1].id).binary:
        raise UsageError(f"{calls[-1].id} writes no records table: end the stack with a decoder that does")
    return Stack(calls)


def _channel_groups(info: catalog.DecoderInfo) -> list[str]:
    """Channel ids with numbered runs folded: ``ad0..ad63`` shows as ``ad0..63``."""
    out: list[str] = []
    for ch in info.all_channels:
        stem = ch.rstrip("0123456789")
        if stem != ch and out and out[-1].startswith(stem) and out[-1][len(stem):].split("..")[0].isdigit():
            out[-1] = f"{out[-1].split('..')[0]}..{ch[len(stem):]}"
        else:
            out.append(ch)
    return out


def _roles_to_channels(info: catalog.DecoderInfo, source: Source, roles: dict[str, str]) -> dict[str, str]:
    channels: dict[str, str] = {}
    for key, target in roles.items():
        try:
            channels.update(_map_channel(info, key, target, source))
        except (KeyError, UsageError):
            continue
    return channels


def _clock_option(source: Source, clk_role: str | None) -> str:
    return "clk" if source.mode == "timing" and clk_role else "state"


def _pci_stacks(source: Source) -> list[Stack]:
    info = catalog.get("pci")
    channels = _roles_to_channels(info, source, source.roles)
    options: dict[str, Any] = {"clock": _clock_option(source, source.role("clk"))}
    bars = source.bus.get("bars") or []
    if bars:
        options["bars"] = ";".join(f"{int(base):#x}+{int(size):#x}" for base, size in bars)
    msi = source.bus.get("msi_window")
    if msi:
        options["msi"] = f"{int(msi[0]):#x}-{int(msi[0]) + int(msi[1]) - 1:#x}"
    stacks = [Stack([DecoderCall("pci", channels, options)])]
    if source.role("inta"):
        stacks.append(Stack([DecoderCall("irq", {"irq": source.roles["inta"]}, {"polarity": "active-low"})]))
    return stacks


def _gmii_stacks(source: Source) -> list[Stack]:
    stacks = []
    for direction, en, er, data in (("tx", "tx_en", "tx_er", "txd"), ("rx", "rx_dv", "rx_er", "rxd")):
        if not source.role(en) or not source.role(data):
            continue
        info = catalog.get("gmii")
        channels = _roles_to_channels(info, source, {"en": source.roles[en], "d": source.roles[data]})
        if source.role(er):
            channels["er"] = source.roles[er]
        clk_role = source.role("tx_clk" if direction == "tx" else "rx_clk") or source.role("clk")
        if clk_role and source.mode == "timing":
            channels["clk"] = clk_role
        options = {"clock": _clock_option(source, clk_role), "direction": direction}
        stacks.append(Stack([DecoderCall("gmii", channels, options), DecoderCall("ethernet")]))
    return stacks


def auto_stacks(source: Source) -> list[Stack]:
    """The stacks a source's recorded bus kind and roles call for (empty when it records neither)."""
    kind = str(source.bus.get("kind", "")).lower()
    stacks: list[Stack] = []
    if kind in ("pci", "pcix") and source.role("frame"):
        stacks += _pci_stacks(source)
    elif kind == "gmii" or source.role("tx_en") or source.role("rx_dv"):
        stacks += _gmii_stacks(source)
    elif source.role("inta"):
        stacks.append(Stack([DecoderCall("irq", {"irq": source.roles["inta"]})]))
    if source.role("act"):
        stacks.append(Stack([DecoderCall("linkactivity", {"act": source.roles["act"]})]))
    return stacks
