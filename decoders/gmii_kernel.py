"""The native kernel of the ``gmii,ethernet`` stack: the ethernet decoder's records from packed GMII rows.

The work is done by ``_gmii_kernel.c`` (its header says what of the two PDs the
records depend on); this module reads the stack's channels and options as the
PDs see them. A ``gmii`` stack without ``ethernet`` above it has no kernel: it
writes no records table, and :func:`nicrig.decoders.spec.parse_stack` refuses it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from nicrig.decoders import runtime
from nicrig.decoders._gmii_kernel import Kernel as _Kernel

#: The gmii decoder's channels in the order of its channel indices (pd.py: EN, D0..D7, ER, CLK).
_CHANNELS = ("en", *(f"d{i}" for i in range(8)), "er", "clk")


def _options(call: runtime.Call) -> dict[str, Any]:
    return runtime.Session._options(runtime.load(call.id), call)


def _bits(call: runtime.Call) -> dict[str, int]:
    cls = runtime.load(call.id)
    ids = [c["id"] for c in cls.channels] + [c["id"] for c in getattr(cls, "optional_channels", ())]
    return dict(zip(ids, runtime.Session._bits(cls, call)))


def link_rate(value: Any) -> float:
    """The ethernet PD's link rate (bit/s) from its option: 1 Gb/s unless a positive number."""
    try:
        rate = float(value)
    except (TypeError, ValueError):
        return 1e9
    return rate if rate > 0 else 1e9


class GmiiEthernetKernel:
    """``gmii,ethernet``: frames (state or timing mode, every option of both PDs) to ethernet records."""

    def __init__(self, calls: Sequence[runtime.Call], samplerate: int, unitsize: int, start: int) -> None:
        gmii, ethernet = calls
        bits = _bits(gmii)
        options = _options(gmii)
        state_mode = not (bits["clk"] >= 0 and options["clock"] in ("auto", "clk"))
        self._kernel = _Kernel(tuple(bits[c] for c in _CHANNELS), unitsize, start, state_mode,
                               options["direction"], link_rate(_options(ethernet)["link_rate"]),
                               runtime.DecoderFailed)

    def feed(self, rows: np.ndarray) -> None:
        self._kernel.feed(rows)

    def finish(self) -> list[dict[str, Any]]:
        return self._kernel.finish()
