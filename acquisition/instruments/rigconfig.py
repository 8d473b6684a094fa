"""Rig configurations: the instruments of a multi-instrument capture, in TOML (``nicrig acquire --config rig.toml``).

::

    description = "send PCI, receive PCI and the GMII probe"
    timeout_s = 30              # for every trigger
    deskew_signal = "REF"       # after fetching, line the sources up on its first rising edge
    # deskew_file = "cal.toml"  # or: offsets measured earlier (nicrig instrument deskew --save)

    [udpmon]                    # optional: traffic while the instruments are armed
    args = ["stream", "198.18.0.2", "--secret-file", "secret", "--sizes", "1472", "--count", "2000"]

    [[instrument]]
    source = "send_pci"                           # the capture-set source it records
    resource = "TCPIP0::192.0.2.10::5025::SOCKET" # VISA resource string
    model = "keysight-msox4000"                   # optional: found from *IDN? when absent
    probe_map = "pci-control"                     # built-in name or a .toml path
    sample_rate_hz = "266.67MHz"
    record_length = 20000
    trigger = { signal = "FRAME#", slope = "falling", position = 0.1 }

    [[instrument]]
    source = "logic"
    sigrok_driver = "fx2lafw"                     # a sigrok device instead of a VISA resource
    sample_rate_hz = 24e6
    record_length = 100000

Relative paths are relative to the configuration file. Every key is listed in
``docs/instruments.md``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from nicrig.acquisition.csv_logic import parse_rate
from nicrig.acquisition.instruments import probemap
from nicrig.acquisition.instruments.driver import Instrument, Settings, Trigger
from nicrig.acquisition.instruments.tomlfile import read_toml

from nicrig.errors import UsageError

SLOPES = ("falling", "rising", "either")
INSTRUMENT_KEYS = {"source", "resource", "model", "sigrok_driver", "sigrok_conn", "sigrok_config", "probe_map",
                   "sample_rate_hz", "record_length", "threshold_v", "trigger", "io_timeout_s", "offset_ps",
                   "batch_points", "format", "bus"}
RIG_KEYS = {"description", "timeout_s", "deskew_signal", "deskew_file", "udpmon", "instrument"}


@dataclass(frozen=True)
class InstrumentConfig:
    source: str
    sample_rate_hz: float
    record_length: int
    resource: str | None = None
    model: str | None = None
    sigrok_driver: str | None = None
    sigrok_conn: str | None = None
    sigrok_config: tuple[str, ...] = ()
    probe_map: str | None = None
    threshold_v: float = 1.4
    trigger: Trigger = field(default_factory=Trigger)
    io_timeout_s: float = 5.0
    offset_ps: int = 0
    batch_points: int = 250_000
    data_format: str = "BYTE"
    bus: dict[str, Any] = field(default_factory=dict)

    def check(self) -> None:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.-]*", self.source):
            raise UsageError(f"source name {self.source!r}: use letters, digits, '_', '.', '-'")
        if (self.resource is None) == (self.sigrok_driver is None):
            raise UsageError(f"{self.source}: give a VISA resource or a sigrok driver (one of them)")
        if self.resource is not None and self.probe_map is None:
            raise UsageError(f"{self.source}: a VISA instrument needs a probe map (which pod bit is which signal)")
        if not 1 <= self.record_length <= 2_000_000_000:
            raise UsageError(f"{self.source}: record length {self.record_length}: 1 to 2e9 samples")
        if not 0 <= self.trigger.position <= 1:
            raise UsageError(f"{self.source}: trigger position {self.trigger.position}: a fraction 0 to 1")
        if not 0.01 <= self.io_timeout_s <= 3600:
            raise UsageError(f"{self.source}: I/O timeout {self.io_timeout_s} s: 0.01 to 3600")
        if self.batch_points < 1:
            raise UsageError(f"{self.source}: batch_points must be at least 1")
        if self.data_format not in ("BYTE", "WORD"):
            raise UsageError(f"{self.source}: format {self.data_format!r}: BYTE or WORD")


@dataclass(frozen=True)
class RigConfig:
    instruments: list[InstrumentConfig]
    timeout_s: float = 30.0
    deskew_signal: str | None = None
    deskew_file: Path | None = None
    udpmon: list[str] | None = None
    description: str = ""


def parse_trigger(text: str, position: float = 0.1) -> Trigger:
    """``FRAME#``, ``FRAME#:rising``, ``external`` or ``external:falling`` as a :class:`Trigger`."""
    name, sep, slope = str(text).rpartition(":")
    if not sep:
        name, slope = str(text), "falling"
    if slope not in SLOPES or not name:
        raise UsageError(f"trigger {text!r}: SIGNAL[:falling|rising|either] or external")
    return Trigger(signal=None if name.lower() == "external" else name, slope=slope, position=position)  # type: ignore[arg-type]


def _trigger(value: Any, where: str) -> Trigger:
    if isinstance(value, str):
        return parse_trigger(value)
    if not isinstance(value, Mapping):
        raise UsageError(f"{where}: trigger must be \"SIGNAL[:slope]\", \"external\" or a table")
    unknown = set(value) - {"signal", "slope", "position"}
    if unknown:
        raise UsageError(f"{where}: unknown trigger key(s) {sorted(unknown)} (signal, slope, position)")
    slope = value.get("slope", "falling")
    if slope not in SLOPES:
        raise UsageError(f"{where}: trigger slope {slope!r}: one of {', '.join(SLOPES)}")
    signal = value.get("signal", "external")
    position = value.get("position", 0.1)
    if not isinstance(position, (int, float)) or isinstance(position, bool):
        raise UsageError(f"{where}: trigger position must be a number")
    return Trigger(signal=None if str(signal).lower() == "external" else str(signal), slope=slope,
                   position=float(position))


def _number(raw: Mapping[str, Any], key: str, kind: type, where: str, default: Any = None) -> Any:
    value = raw.get(key, default)
    if value is None:
        raise UsageError(f"{where}: {key} is required")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (kind is int and not float(value).is_integer()):
        raise UsageError(f"{where}: {key} must be {'an integer' if kind is int else 'a number'}, not {value!r}")
    return kind(value)


def _text(raw: Mapping[str, Any], key: str, where: str) -> str | None:
    value = raw.get(key)
    if value is not None and not isinstance(value, str):
        raise UsageError(f"{where}: {key} must be a string, not {value!r}")
    return value


def instrument_from_dict(raw: Mapping[str, Any], where: str, base: Path) -> InstrumentConfig:
    unknown = sorted(set(raw) - INSTRUMENT_KEYS)
    if unknown:
        raise UsageError(f"{where}: unknown key(s) {unknown} (known: {', '.join(sorted(INSTRUMENT_KEYS))})")
    text = {k: _text(raw, k, where) for k in ("source", "resource", "model", "sigrok_driver", "sigrok_conn",
                                              "probe_map", "format")}
    rate = raw.get("sample_rate_hz")
    if rate is None:
        raise UsageError(f"{where}: sample_rate_hz is required")
    pm = text["probe_map"]
    if pm is not None and pm.endswith(".toml"):
        pm = str(base / pm)
    options = raw.get("sigrok_config", [])
    if not isinstance(options, list) or not all(isinstance(o, str) for o in options):
        raise UsageError(f"{where}: sigrok_config must be a list of \"KEY=VALUE\" strings")
    bus = raw.get("bus", {})
    if not isinstance(bus, Mapping):
        raise UsageError(f"{where}: bus must be a table")
    cfg = InstrumentConfig(
        source=text["source"] or "", resource=text["resource"], model=text["model"],
        sigrok_driver=text["sigrok_driver"], sigrok_conn=text["sigrok_conn"], sigrok_config=tuple(options),
        probe_map=pm, sample_rate_hz=parse_rate(str(rate)),
        record_length=_number(raw, "record_length", int, where),
        threshold_v=_number(raw, "threshold_v", float, where, 1.4),
        trigger=_trigger(raw["trigger"], where) if "trigger" in raw else Trigger(), io_timeout_s=_number(raw, "io_timeout_s", float, where, 5.0),
        offset_ps=_number(raw, "offset_ps", int, where, 0), batch_points=_number(raw, "batch_points", int, where,
                                                                                  250_000),
        data_format=(text["format"] or "BYTE").upper(), bus=dict(bus))
    cfg.check()
    return cfg


def load(path: str | Path) -> RigConfig:
    """Read and check a rig configuration."""
    p = Path(path)
    raw = read_toml(p, "rig configuration")
    unknown = sorted(set(raw) - RIG_KEYS)
    if unknown:
        raise UsageError(f"{p}: unknown key(s) {unknown} (known: {', '.join(sorted(RIG_KEYS))})")
    items = raw.get("instrument")
    if not isinstance(items, list) or not items:
        raise UsageError(f"{p}: no [[instrument]] tables")
    base = p.parent
    instruments = [instrument_from_dict(item, f"{p} instrument {i + 1}", base) for i, item in enumerate(items)]
    names = [c.source for c in instruments]
    if len(set(names)) != len(names):
        raise UsageError(f"{p}: two instruments record the same source ({', '.join(names)})")
    udpmon = raw.get("udpmon")
    argv = None
    if udpmon is not None:
        argv = udpmon.get("args") if isinstance(udpmon, Mapping) else None
        if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv) \
                or argv[0] not in ("latency", "stream"):
            raise UsageError(f"{p}: [udpmon] args must be a list starting with \"latency\" or \"stream\"")
    deskew_file = raw.get("deskew_file")
    config = RigConfig(instruments=instruments, timeout_s=_number(raw, "timeout_s", float, str(p), 30.0),
                       deskew_signal=raw.get("deskew_signal"), udpmon=argv,
                       deskew_file=base / deskew_file if deskew_file else None,
                       description=str(raw.get("description", "")))
    if config.deskew_file is not None:
        from nicrig.acquisition.instruments import deskew

        offsets = deskew.load(config.deskew_file)
        config = replace(config, instruments=[replace(c, offset_ps=offsets.get(c.source, c.offset_ps))
                                              for c in instruments])
    return config


def open_instrument(cfg: InstrumentConfig) -> tuple[Instrument, Settings]:
    """Connect to the instrument ``cfg`` names and build its settings (the probe map is loaded here)."""
    if cfg.sigrok_driver is not None:
        from nicrig.acquisition.instruments.sigrok import SigrokDevice

        dev = SigrokDevice(cfg.source, cfg.sigrok_driver, conn=cfg.sigrok_conn, options=list(cfg.sigrok_config),
                           timeout_s=max(cfg.io_timeout_s, 20.0))
        dev.identify()
        pm = probemap.load(cfg.probe_map) if cfg.probe_map else dev.default_probe_map()
        inst: Instrument = dev
    else:
        from nicrig.acquisition.instruments.registry import open_scpi

        pm = probemap.load(cfg.probe_map)  # type: ignore[arg-type]
        inst = open_scpi(cfg.source, cfg.resource, cfg.model, timeout_s=cfg.io_timeout_s,  # type: ignore[arg-type]
                         data_format=cfg.data_format)
    if cfg.trigger.signal is not None:
        try:
            pm.where(cfg.trigger.signal)
        except UsageError as exc:
            inst.close()
            raise UsageError(f"{cfg.source}: trigger {cfg.trigger.signal!r}: {exc}") from None
    return inst, Settings(probe_map=pm, sample_rate_hz=cfg.sample_rate_hz, record_length=cfg.record_length,
                          trigger=cfg.trigger, threshold_v=cfg.threshold_v, batch_points=cfg.batch_points)
