"""The SCPI drivers by model name, and opening an instrument by its VISA resource string."""

from __future__ import annotations

import re
from typing import Any

from nicrig.acquisition.instruments.driver import (
    ScpiConnection,
    ScpiInstrument,
    WrongInstrument,
    parse_idn,
)
from nicrig.acquisition.instruments.keysight import (
    KeysightInfiniiVision,
    KeysightInfiniiVision3000,
)
from nicrig.acquisition.instruments.rigol import RigolMso5000
from nicrig.acquisition.instruments.tektronix import (
    TektronixMso,
    TektronixMso4,
    TektronixMso6,
)

from nicrig.errors import UsageError

DRIVERS: dict[str, type[ScpiInstrument]] = {
    cls.model: cls for cls in (KeysightInfiniiVision, KeysightInfiniiVision3000, RigolMso5000, TektronixMso4,
                               TektronixMso, TektronixMso6)
}


def driver_for(manufacturer: str, model: str) -> type[ScpiInstrument] | None:
    """The driver whose ``*IDN?`` patterns match, or None."""
    for cls in DRIVERS.values():
        if re.search(cls.manufacturers, manufacturer, re.IGNORECASE) and re.search(cls.models, model, re.IGNORECASE):
            return cls
    return None


def open_scpi(name: str, resource: str, model: str | None = None, *, timeout_s: float = 5.0,
              **options: Any) -> ScpiInstrument:
    """Connect to ``resource``, pick the driver (``model``, or the one ``*IDN?`` matches) and identify it."""
    if model is not None and model not in DRIVERS:
        raise UsageError(f"unknown instrument model {model!r} (known: {', '.join(DRIVERS)})")
    conn = ScpiConnection(resource, timeout_s)
    try:
        if model is None:
            ident = parse_idn(conn.query("*IDN?"))
            cls = driver_for(ident.manufacturer, ident.model)
            if cls is None:
                raise WrongInstrument(f"{name}: {resource} is a {ident.manufacturer} {ident.model}, which no nicrig "
                                      f"driver drives (drivers: {', '.join(DRIVERS)})")
        else:
            cls = DRIVERS[model]
        inst = cls(name, resource, connection=conn, **options)
        inst.identify()
    except BaseException:
        conn.close()
        raise
    return inst
