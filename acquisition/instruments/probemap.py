"""Probe maps: which bit of which pod of an instrument is which bus signal.

A probe map is a TOML file (``data/probemaps/<name>.toml``, or any path)::

    description = "PCI control lines, bus clock and the rig's reference on two 8-bit pods"

    [bus]                  # optional: stored as the source's bus (kind, width_bits, clock_hz ...)
    kind = "pci"

    [pod.1]                # pod 1: Keysight/Rigol D0-D7, Tektronix CH1_D0..D7
    0 = "FRAME#"
    1 = "IRDY#"

    [pod.2]                # pod 2: Keysight/Rigol D8-D15, Tektronix CH2_D0..D7
    0 = "CLK"

    [roles]                # optional: roles the names do not give (``nicrig import`` guesses the rest)
    clk = "CLK"

A source recorded through it has one channel per mapped signal, in (pod, bit)
order. See ``docs/instruments.md`` for the wiring of PCI and GMII signals.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
from nicrig.acquisition.capture import pack_bits, vectors_from_names
from nicrig.acquisition.instruments.tomlfile import read_toml

from nicrig.errors import UsageError

#: Bits per pod: every supported instrument groups its digital channels by eight.
POD_BITS = 8
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_#/.\-]*(\[\d+\])?$")


@dataclass(frozen=True)
class ProbeMap:
    """Signals by ``(pod, bit)``; pods are numbered from 1."""

    name: str
    signals: Mapping[tuple[int, int], str]
    description: str = ""
    bus: Mapping[str, Any] = field(default_factory=dict)
    roles: Mapping[str, str] = field(default_factory=dict)

    @property
    def channels(self) -> list[str]:
        """The source's channel names, in (pod, bit) order: channel ``k`` is bit ``k`` of a packed sample."""
        return [self.signals[key] for key in sorted(self.signals)]

    @property
    def pods(self) -> list[int]:
        return sorted({pod for pod, _ in self.signals})

    def where(self, signal: str) -> tuple[int, int]:
        """``(pod, bit)`` of ``signal``."""
        for key, name in self.signals.items():
            if name == signal:
                return key
        raise UsageError(f"probe map {self.name!r} has no signal {signal!r} (signals: {', '.join(self.channels)})")

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "pods": {str(p): {str(b): s for (q, b), s in sorted(self.signals.items()) if q == p}
                                            for p in self.pods}}


def builtin_dir() -> Path:
    return Path(str(resources.files("nicrig.data").joinpath("probemaps")))


def available() -> list[str]:
    """Names of the probe maps shipped in ``data/probemaps``."""
    return sorted(p.stem for p in builtin_dir().glob("*.toml"))


def load(name_or_path: str | Path) -> ProbeMap:
    """A built-in probe map by name, or a TOML file by path."""
    path = Path(name_or_path)
    if path.suffix != ".toml":
        path = builtin_dir() / f"{name_or_path}.toml"
        if not path.exists():
            raise UsageError(f"unknown probe map {str(name_or_path)!r} (built in: {', '.join(available())}; "
                             "or give a .toml path)")
    return from_dict(read_toml(path, "probe map"), path.stem, str(path))


def from_dict(raw: Mapping[str, Any], name: str, origin: str = "probe map") -> ProbeMap:
    """Validate a parsed probe map (see the module docstring for the layout)."""
    unknown = sorted(set(raw) - {"description", "bus", "pod", "roles"})
    if unknown:
        raise UsageError(f"{origin}: unknown key(s) {unknown} (expected description, bus, pod, roles)")
    pods = raw.get("pod")
    if not isinstance(pods, Mapping) or not pods:
        raise UsageError(f"{origin}: no [pod.N] tables: say which signal is on which bit")
    signals: dict[tuple[int, int], str] = {}
    for pod_key, bits in pods.items():
        if not str(pod_key).isdigit() or int(pod_key) < 1:
            raise UsageError(f"{origin}: pod {pod_key!r}: pods are numbered 1, 2, ...")
        if not isinstance(bits, Mapping):
            raise UsageError(f"{origin}: [pod.{pod_key}] must be a table of bit = \"SIGNAL\"")
        for bit_key, signal in bits.items():
            if not str(bit_key).isdigit() or not 0 <= int(bit_key) < POD_BITS:
                raise UsageError(f"{origin}: pod {pod_key} bit {bit_key!r}: bits are 0 to {POD_BITS - 1}")
            if not isinstance(signal, str) or not _NAME.match(signal):
                raise UsageError(f"{origin}: pod {pod_key} bit {bit_key}: bad signal name {signal!r}")
            signals[(int(pod_key), int(bit_key))] = signal
    names = list(signals.values())
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise UsageError(f"{origin}: signal(s) {dup} on more than one bit")
    try:
        vectors_from_names(names)
    except UsageError as exc:
        raise UsageError(f"{origin}: {exc}") from None
    bus = raw.get("bus", {})
    roles = raw.get("roles", {})
    if not isinstance(bus, Mapping) or not isinstance(roles, Mapping):
        raise UsageError(f"{origin}: [bus] and [roles] must be tables")
    known = set(names) | set(vectors_from_names(names))
    for role, target in roles.items():
        if target not in known:
            raise UsageError(f"{origin}: role {role!r} names {target!r}, which is not a signal of this map")
    description = raw.get("description", "")
    if not isinstance(description, str):
        raise UsageError(f"{origin}: description must be a string")
    return ProbeMap(name=name, signals=signals, description=description, bus=dict(bus), roles=dict(roles))


def source_roles(pm: ProbeMap) -> tuple[dict[str, str], dict[str, Any]]:
    """Roles and bus of a source recorded through ``pm``: named roles as ``nicrig import`` guesses them, then the map's."""
    from nicrig.acquisition.importing import guess_roles

    roles, kind, _ = guess_roles(pm.channels)
    bus = ({"kind": kind} if kind else {}) | dict(pm.bus)
    return roles | dict(pm.roles), bus


# -- pod bytes <-> packed samples --------------------------------------------------------------------
def pack_pods(pm: ProbeMap, pods: Mapping[int, np.ndarray]) -> np.ndarray:
    """Packed source samples ``(n, unitsize)`` from each pod's bytes (bit ``b`` of pod ``p``'s byte = D(8(p-1)+b))."""
    n = len(next(iter(pods.values()))) if pods else 0
    cols = np.empty((n, len(pm.signals)), dtype=np.uint8)
    for k, (pod, bit) in enumerate(sorted(pm.signals)):
        cols[:, k] = (np.asarray(pods[pod], dtype=np.uint8) >> bit) & 1
    return pack_bits(cols)


def pod_bytes(pm: ProbeMap, levels: Mapping[str, np.ndarray], n: int) -> dict[int, np.ndarray]:
    """Each pod's bytes from 0/1 ``levels`` per signal (the wiring as an instrument sees it; unwired bits 0)."""
    out = {pod: np.zeros(n, dtype=np.uint8) for pod in pm.pods}
    for (pod, bit), signal in pm.signals.items():
        out[pod] |= (np.asarray(levels[signal], dtype=np.uint8) & 1) << bit
    return out


class PodAssembler:
    """Joins pod bytes that arrive pod by pod, or batch by batch, into rows of a source.

    ``add(pod, data)`` takes the next bytes of one pod (one byte per sample);
    every row that all pods have reached is packed and handed to ``append`` at
    once. :meth:`flush_partial` writes the rows that only some pods reached
    (the others' bits 0) after a failure, and says how far each pod got.
    """

    def __init__(self, pm: ProbeMap, append: Callable[[np.ndarray], None]):
        self.pm = pm
        self._append = append
        self._pending = {pod: bytearray() for pod in pm.pods}
        self.received = {pod: 0 for pod in pm.pods}
        self.rows = 0

    def add(self, pod: int, data: bytes) -> None:
        if pod not in self._pending:
            raise UsageError(f"pod {pod} is not in probe map {self.pm.name!r}")
        self._pending[pod] += data
        self.received[pod] += len(data)
        self._emit(min(len(b) for b in self._pending.values()))

    def _emit(self, n: int) -> None:
        if n <= 0:
            return
        pods = {}
        for pod, buf in self._pending.items():
            part = np.frombuffer(bytes(buf[:n]), dtype=np.uint8)
            pods[pod] = np.pad(part, (0, n - len(part)))
            del buf[:n]
        self._append(pack_pods(self.pm, pods))
        self.rows += n

    def flush_partial(self) -> dict[int, int]:
        """Write the rows some pod reached (missing pods' bits 0); return the samples received per pod."""
        self._emit(max((len(b) for b in self._pending.values()), default=0))
        return dict(self.received)
