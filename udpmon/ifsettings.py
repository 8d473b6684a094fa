"""The interface settings a sweep changes, on this host: MTU (``ip link``) and interrupt coalescing (``ethtool -C``).

Hughes-Jones et al. 2003, §8 sweeps the receive interrupt coalescence (RxInt, in
1.024 us units) of an Intel PRO/1000; Geist et al. n.d. sweeps RxAbsIntDelay and the
MTU (1500..6000); Feng et al. 2003 the MTU (1500..16000). On Linux these are
``ip link set dev IF mtu N`` and ``ethtool -C IF rx-usecs N`` (and the other
coalescing parameters). A :class:`Tuner` remembers each setting's value
before its first change and puts every one back in :meth:`Tuner.restore`;
the near host calls it when a run ends however it ends, the daemon when its
controller's session ends.

A host that cannot do what is asked (no ``ethtool``, a driver without
coalescing settings such as veth, an MTU beyond the device's range) raises
:class:`SettingRefused` saying which host refused what and why.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass, field
from typing import Any

from nicrig.udpmon.counters import parse_ethtool_coalesce

from nicrig.errors import NicrigError, UsageError

#: ``ethtool -C`` parameters (ethtool 6.1), in its order; the booleans take on/off.
COALESCE_PARAMS = (
    "adaptive-rx", "adaptive-tx", "sample-interval", "stats-block-usecs", "pkt-rate-low", "pkt-rate-high",
    "rx-usecs", "rx-frames", "rx-usecs-irq", "rx-frames-irq", "tx-usecs", "tx-frames", "tx-usecs-irq",
    "tx-frames-irq", "rx-usecs-low", "rx-frames-low", "tx-usecs-low", "tx-frames-low", "rx-usecs-high",
    "rx-frames-high", "tx-usecs-high", "tx-frames-high", "cqe-mode-rx", "cqe-mode-tx",
)
BOOLEAN_PARAMS = frozenset({"adaptive-rx", "adaptive-tx", "cqe-mode-rx", "cqe-mode-tx"})
SETTINGS = ("mtu", *COALESCE_PARAMS)
#: Largest value any of them takes (the kernel's fields are u32).
MAX_VALUE = 2**32 - 1
TIMEOUT_S = 10.0

Value = int | bool


class SettingRefused(NicrigError):
    """A host cannot read or change an interface setting."""


def parse_value(name: str, text: str) -> Value:
    """A setting's value from text: on/off for the booleans, a non-negative integer otherwise."""
    if name not in SETTINGS:
        raise UsageError(f"unknown setting {name!r}: use mtu or an ethtool -C parameter "
                         f"({', '.join(COALESCE_PARAMS)})")
    low = text.strip().lower()
    if name in BOOLEAN_PARAMS:
        if low not in ("on", "off"):
            raise UsageError(f"{name} takes on or off, not {text!r}")
        return low == "on"
    if not low.isdigit():
        raise UsageError(f"{name} takes a non-negative integer, not {text!r}")
    value = int(low)
    if value > MAX_VALUE or (name == "mtu" and value < 68):
        raise UsageError(f"{name} {value} is out of range" + (" (an IPv4 interface needs 68 at least)"
                                                             if name == "mtu" else ""))
    return value


def check_value(name: str, value: Any) -> Value:
    """A value received over the control protocol, checked like :func:`parse_value`."""
    if name in BOOLEAN_PARAMS:
        if not isinstance(value, bool):
            raise UsageError(f"{name} takes true or false, not {value!r}")
        return value
    if isinstance(value, bool) or not isinstance(value, int):
        raise UsageError(f"{name} takes an integer, not {value!r}")
    return parse_value(name, str(value))


def show(value: Value) -> str:
    """A value as ``ip``/``ethtool`` want it."""
    return ("on" if value else "off") if isinstance(value, bool) else str(value)


def commands(interface: str, settings: dict[str, Value]) -> list[list[str]]:
    """The commands that put ``settings`` into force on ``interface`` (one ``ip``, one ``ethtool -C``)."""
    out = []
    if "mtu" in settings:
        out.append(["ip", "link", "set", "dev", interface, "mtu", show(settings["mtu"])])
    coalesce = [(k, v) for k, v in settings.items() if k != "mtu"]
    if coalesce:
        out.append(["ethtool", "-C", interface, *[x for k, v in coalesce for x in (k, show(v))]])
    return out


def _run(argv: list[str]) -> tuple[bool, str]:
    """(succeeded, stdout or the tool's own last error line)."""
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT_S, check=False,
                           env={**os.environ, "LC_ALL": "C"})
    except FileNotFoundError:
        return False, f"{argv[0]} is not installed"
    except subprocess.TimeoutExpired:
        return False, f"timed out after {TIMEOUT_S:g} s"
    if p.returncode != 0:
        lines = (p.stderr.strip() or p.stdout.strip() or f"exit status {p.returncode}").splitlines()
        return False, lines[-1].strip()
    return True, p.stdout


def _why(message: str) -> str:
    if "Operation not supported" in message:
        return f"{message} (its driver does not offer this setting)"
    if "Operation not permitted" in message:
        return f"{message} (needs root: CAP_NET_ADMIN)"
    return message


def read(interface: str, names: list[str], where: str = "this host") -> dict[str, Value]:
    """The values in force of ``names`` on ``interface``; SettingRefused when the host cannot say."""
    out: dict[str, Value] = {}
    if "mtu" in names:
        ok, text = _run(["ip", "-j", "link", "show", "dev", interface])
        if not ok:
            raise SettingRefused(f"{where}: cannot read the MTU of {interface}: ip link show: {text}")
        out["mtu"] = int(json.loads(text)[0]["mtu"])
    coalesce = [n for n in names if n != "mtu"]
    if coalesce:
        ok, text = _run(["ethtool", "-c", interface])
        if not ok:
            raise SettingRefused(f"{where} refuses {', '.join(coalesce)} on {interface}: it cannot even report "
                                 f"its interrupt coalescing: ethtool -c {interface}: {_why(text)}")
        parsed = parse_ethtool_coalesce(text)
        for n in coalesce:
            v = parsed.get(n)
            if v is None:
                raise SettingRefused(f"{where} refuses {n} on {interface}: ethtool -c reports it as n/a "
                                     f"(its driver does not offer this setting)")
            out[n] = v
    return out


def mtu_range(interface: str) -> tuple[int, int] | None:
    """(min, max) MTU the device takes, from ``ip -d -j link``; None when it states no range."""
    ok, text = _run(["ip", "-d", "-j", "link", "show", "dev", interface])
    if not ok:
        return None
    info = json.loads(text)[0]
    lo, hi = int(info.get("min_mtu", 0)), int(info.get("max_mtu", 0))
    return (lo, hi) if hi > 0 else None


def check(interface: str, settings: dict[str, Value], where: str = "this host") -> dict[str, Value]:
    """Refuse now what the host would refuse later (as far as it can tell); the values in force."""
    current = read(interface, list(settings), where)
    if "mtu" in settings and (rng := mtu_range(interface)) is not None:
        lo, hi = rng
        if not lo <= int(settings["mtu"]) <= hi:
            raise SettingRefused(f"{where} refuses mtu={settings['mtu']} on {interface}: the device takes "
                                 f"{lo} to {hi}")
    return current


def apply(interface: str, settings: dict[str, Value], where: str = "this host") -> None:
    """Put ``settings`` into force on ``interface``; SettingRefused naming the host, setting and reason."""
    for argv in commands(interface, settings):
        ok, text = _run(argv)
        if not ok:
            what = ", ".join(f"{k}={show(v)}" for k, v in settings.items() if (k == "mtu") == (argv[0] == "ip"))
            raise SettingRefused(f"{where} refuses {what} on {interface}: {' '.join(argv)}: {_why(text)}")


@dataclass
class Tuner:
    """Changes settings of one interface and remembers the values it found, to put them back."""

    interface: str
    where: str = "this host"
    original: dict[str, Value] = field(default_factory=dict)

    def set(self, settings: dict[str, Value]) -> dict[str, Value]:
        """Apply ``settings`` (reading the value in force of each before its first change); the previous values."""
        before = read(self.interface, list(settings), self.where)
        for k, v in before.items():
            self.original.setdefault(k, v)
        apply(self.interface, settings, self.where)
        return before

    def restore(self) -> dict[str, Value]:
        """Put every changed setting back; the values restored. Raises SettingRefused if one cannot be."""
        restored: dict[str, Value] = {}
        failures = []
        # each command on its own: a coalescing setting that cannot go back must not keep the MTU from it
        for group in ({k: v for k, v in self.original.items() if k == "mtu"},
                      {k: v for k, v in self.original.items() if k != "mtu"}):
            if not group:
                continue
            try:
                apply(self.interface, group, self.where)
            except SettingRefused as exc:
                failures.append(str(exc))
                continue
            restored.update(group)
            for k in group:
                del self.original[k]
        if failures:
            raise SettingRefused("could not restore the previous settings: " + "; ".join(failures))
        return restored
