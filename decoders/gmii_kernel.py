"""The native kernel of the ``gmii,ethernet`` stack: the ethernet table's rows from packed GMII rows.

The work is done by ``_gmii_kernel.c`` (its header says what of the two PDs the
records depend on); this module reads the stack's channels and options as the
PDs see them. A ``gmii`` stack without ``ethernet`` above it has no kernel: it
writes no records table, and :func:`nicrig.decoders.spec.parse_stack` refuses it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from nicrig.decoders import kernels, runtime, tables
from nicrig.decoders._gmii_kernel import Kernel as _Kernel

#: The gmii decoder's channels in the order of its channel indices (pd.py: EN, D0..D7, ER, CLK).
_CHANNELS = ("en", *(f"d{i}" for i in range(8)), "er", "clk")


class GmiiEthernetKernel:
    """``gmii,ethernet``: frames (state or timing mode, every option of both PDs) to ethernet table rows."""

    output = "ethernet"

    def __init__(self, calls: Sequence[runtime.Call], samplerate: int, unitsize: int, start: int) -> None:
        gmii, ethernet = calls
        bits = kernels.channel_bits(gmii)
        options = kernels.options(gmii)
        state_mode = not (bits["clk"] >= 0 and options["clock"] in ("auto", "clk"))
        self._kernel = _Kernel(tuple(bits[c] for c in _CHANNELS), unitsize, start, state_mode,
                               options["direction"], kernels.link_rate(kernels.options(ethernet)["link_rate"]),
                               runtime.DecoderFailed, *tables.layout(self.output))

    def feed(self, rows: np.ndarray) -> None:
        self._kernel.feed(rows)

    def take(self) -> np.ndarray:
        return kernels.table_rows(self.output, self._kernel.take())

    def finish(self) -> np.ndarray:
        """A burst still open at the end is a truncated frame, which the ethernet decoder does not record."""
        return self.take()

    def carried(self) -> Any:
        """Whether a burst is open, and ethernet's fragmented datagrams (what a later fragment's record reads)."""
        return self._kernel.carried()

    def carry(self, state: Any) -> None:
        """Start from :meth:`carried` of another run at this kernel's start sample (before any ``feed``)."""
        self._kernel.carry(state)
