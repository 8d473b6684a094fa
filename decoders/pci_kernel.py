"""The ``pci`` decoder's kernel: its table rows from packed sample rows, in C (``_pci_kernel.c``).

This side reads the stack's channel map and options the way the PD does in
its ``setup()`` (clock mode, BAR and MSI ranges parsed by the PD's own
``parse_ranges``) and hands the C port the PD's own tables (command names and
sets, DEVSEL# speeds); ``_pci_kernel.c`` says how it follows the PD clock by
clock and which samples it looks at.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from nicrig.decoders import kernels, runtime, tables
from nicrig.decoders._pci_kernel import Kernel as _Kernel

_U64 = (1 << 64) - 1


def _ranges(parse: Any, text: str) -> tuple[list[tuple[int, int]], bool]:
    """The PD's ranges as 64-bit pairs (none can hold a bus address above 2**64 - 1), and whether any parsed."""
    parsed, _bad = parse(text)
    return [(first, min(last, _U64)) for first, last in parsed if first <= _U64], bool(parsed)


class PciKernel:
    """One ``pci`` decoder over a stream of packed rows (the contract of :mod:`nicrig.decoders.kernels`)."""

    output = "pci"

    def __init__(self, calls: Sequence[runtime.Call], samplerate: int, unitsize: int, start: int) -> None:
        (call,) = calls
        pd = kernels.pd_namespace("pci")
        options = kernels.options(call)
        bits = list(kernels.channel_bits(call).values())
        if len(bits) != pd["NUM_CHANNELS"]:
            raise runtime.DecoderFailed(f"pci kernel: the PD has {len(bits)} channels, the kernel knows "
                                        f"{pd['NUM_CHANNELS']}")
        if any(b >= 8 * unitsize for b in bits):
            raise runtime.DecoderFailed(f"pci: a channel bit is outside the {unitsize}-byte sample row")
        # pd.setup(): 'auto' clocks on CLK edges when CLK is connected; 'clk' without CLK falls back to one
        # sample per clock; any other value than 'state' is taken as clocked, as the PD takes it.
        mode = options["clock"]
        have_clk = bits[pd["CLK"]] >= 0
        if mode == "auto":
            mode = "clk" if have_clk else "state"
        elif mode == "clk" and not have_clk:
            mode = "state"
        bars, bars_given = _ranges(pd["parse_ranges"], options["bars"])
        msi, _ = _ranges(pd["parse_ranges"], options["msi"])
        self._kernel = _Kernel(
            bits, unitsize, start, mode == "state", bars, bars_given, msi, pd["CMD_NAMES"], pd["DEVSEL_SPEEDS"],
            pd["CMDS_CONFIG"], pd["CMDS_MEM"], pd["CMDS_IO"], pd["CMDS_MEM_WRITE"], pd["CMD_DAC"],
            *tables.layout(self.output))

    def feed(self, rows: np.ndarray) -> None:
        self._kernel.feed(rows)

    def take(self) -> np.ndarray:
        return kernels.table_rows(self.output, self._kernel.take())

    def finish(self) -> np.ndarray:
        return kernels.table_rows(self.output, self._kernel.finish())
