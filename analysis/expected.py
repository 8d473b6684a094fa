"""Expected latency slope from the elements of a path (Hughes-Jones et al. 2003, §3.1).

The slope of round-trip time against response size is "the sum of the
inverse data transfer rates for each step of the end-to-end path" (Hughes-Jones et al. 2003
3.1): for two back-to-back hosts with store-and-forward NICs, memory copy +
PCI + Ethernet + PCI + memory copy. Each element here carries its inverse rate
in us/byte as an exact :class:`~fractions.Fraction`, so the seed's table is
reproduced digit for digit (its rounding is half-up to three significant
figures; float arithmetic would turn 0.01175 into 0.0117).

Elements: conventional PCI and PCI-X (width x clock), PCI Express generations
1-5 over 1-16 lanes (line encoding, TLP framing and header, and the DLLPs
acknowledging and crediting them, for a given MaxPayload), Ethernet at 100M,
1G, 10G, 25G and 100G, and a memory copy at a given bandwidth. A path through
store-and-forward devices adds its elements' inverse rates; a cut-through
path streams the bytes through every element at once and is limited by its
slowest one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal
from fractions import Fraction
from typing import Literal

from nicrig.analysis.citations import HUGHES_JONES
from nicrig.analysis.quantity import number
from nicrig.analysis.sentence import Sentence
from nicrig.errors import UsageError

#: Nominal bus clocks, MHz, as exact fractions: "33 MHz" PCI runs at 33 1/3 MHz.
NOMINAL_CLOCKS_MHZ = {33: Fraction(100, 3), 66: Fraction(200, 3), 100: Fraction(100), 133: Fraction(400, 3),
                      266: Fraction(800, 3), 533: Fraction(1600, 3)}
#: PCI Express: transfer rate per lane (GT/s) and line-code efficiency, per generation.
PCIE_GT_PER_S = {1: Fraction(5, 2), 2: Fraction(5), 3: Fraction(8), 4: Fraction(16), 5: Fraction(32)}
PCIE_ENCODING = {1: Fraction(8, 10), 2: Fraction(8, 10), 3: Fraction(128, 130), 4: Fraction(128, 130),
                 5: Fraction(128, 130)}
PCIE_LANES = (1, 2, 4, 8, 12, 16)
PCIE_MAX_PAYLOADS = (128, 256, 512, 1024, 2048, 4096)
#: Bytes a TLP carries besides header and data: framing and sequence number
#: (gen 1-2: STP 1 + sequence 2 + END 1; gen 3+: the 4-byte STP token holding
#: the sequence number) plus the 4-byte LCRC: 8 in every generation.
PCIE_TLP_FRAMING_BYTES = 8
#: A DLLP on the link: 8 bytes in every generation (gen 1-2: SDP + 6 + END; gen 3+: 2-byte token + 6).
PCIE_DLLP_BYTES = 8
ETHERNET_RATES_BPS = {"100m": 100e6, "1g": 1e9, "10g": 10e9, "25g": 25e9, "100g": 100e9}

Mode = Literal["store-and-forward", "cut-through"]


@dataclass(frozen=True)
class PathElement:
    """One step a byte takes: its name and exact inverse transfer rate (us per byte)."""

    name: str
    us_per_byte: Fraction

    @property
    def mbytes_per_s(self) -> float:
        """Transfer rate in MB/s (10^6 bytes per second): bytes per microsecond."""
        return float(1 / self.us_per_byte)


def _nominal_mhz(clock_mhz: float | Fraction) -> tuple[str, Fraction]:
    """The nominal clock a given clock stands for, as (name, exact MHz): 33.33 or 33 -> ("33", 100/3)."""
    for name, mhz in NOMINAL_CLOCKS_MHZ.items():
        if abs(float(clock_mhz) - float(mhz)) <= 0.02 * float(mhz):
            return str(name), mhz
    exact = Fraction(clock_mhz).limit_denominator(1_000_000)
    return f"{float(exact):g}", exact


def _parallel_bus(kind: str, width_bits: int, clock_mhz: float | Fraction) -> PathElement:
    if width_bits not in (32, 64):
        raise UsageError(f"{kind}: width must be 32 or 64 bits, not {width_bits}")
    if not 1 <= float(clock_mhz) <= 1066:
        raise UsageError(f"{kind}: clock {clock_mhz} MHz is out of range")
    name, mhz = _nominal_mhz(clock_mhz)
    return PathElement(f"{kind} {width_bits}-bit {name} MHz", 1 / (Fraction(width_bits, 8) * mhz))


def pci(width_bits: int, clock_mhz: float | Fraction) -> PathElement:
    """Conventional PCI: one bus word per clock at best (PCI 3.0; Hughes-Jones et al. 2003, §3.1: 32/33 ->
    0.0075 us/byte)."""
    return _parallel_bus("PCI", width_bits, clock_mhz)


def pcix(width_bits: int, clock_mhz: float | Fraction) -> PathElement:
    """PCI-X: one bus word per clock (66, 100, 133 MHz; Feng et al. 2003: 64/133 is 8.5 Gbit/s)."""
    return _parallel_bus("PCI-X", width_bits, clock_mhz)


def pcie_efficiency(max_payload_bytes: int, *, header_bytes: int = 16, ecrc: bool = False,
                    tlps_per_ack: int = 4, tlps_per_fc_update: int = 4) -> Fraction:
    """Share of a PCIe link's bytes (after line coding) that are payload, for full MaxPayload TLPs.

    Per TLP: header (12 bytes for 32-bit, 16 for 64-bit addresses), framing
    and sequence number and LCRC (:data:`PCIE_TLP_FRAMING_BYTES`), ECRC if
    used; and the share of the Ack and UpdateFC DLLPs that flow back for it,
    one of each per ``tlps_per_ack`` / ``tlps_per_fc_update`` TLPs (an
    assumption: links batch them; set them to what the link does).
    """
    if max_payload_bytes not in PCIE_MAX_PAYLOADS:
        raise UsageError(f"PCIe MaxPayload must be one of {PCIE_MAX_PAYLOADS}, not {max_payload_bytes}")
    if header_bytes not in (12, 16):
        raise UsageError("PCIe TLP header is 12 (3DW) or 16 (4DW) bytes")
    if tlps_per_ack < 1 or tlps_per_fc_update < 1:
        raise UsageError("TLPs per Ack / UpdateFC DLLP must be at least 1")
    overhead = (PCIE_TLP_FRAMING_BYTES + header_bytes + (4 if ecrc else 0)
                + Fraction(PCIE_DLLP_BYTES, tlps_per_ack) + Fraction(PCIE_DLLP_BYTES, tlps_per_fc_update))
    return Fraction(max_payload_bytes) / (max_payload_bytes + overhead)


def pcie(gen: int, lanes: int, max_payload_bytes: int = 256, **overheads: int | bool) -> PathElement:
    """PCI Express generation ``gen`` (1-5) over ``lanes``: raw rate x line code x TLP/DLLP efficiency.

    Gen 1-2 use 8b/10b, gen 3-5 128b/130b. ``overheads`` go to :func:`pcie_efficiency`.
    """
    if gen not in PCIE_GT_PER_S:
        raise UsageError(f"PCIe generation must be 1 to 5, not {gen}")
    if lanes not in PCIE_LANES:
        raise UsageError(f"PCIe lanes must be one of {PCIE_LANES}, not {lanes}")
    bytes_per_us = (lanes * PCIE_GT_PER_S[gen] * 1000 * PCIE_ENCODING[gen] / 8
                    * pcie_efficiency(max_payload_bytes, **overheads))  # type: ignore[arg-type]
    return PathElement(f"PCIe gen{gen} x{lanes} MaxPayload {max_payload_bytes}", 1 / bytes_per_us)


def ethernet(rate_bps: float) -> PathElement:
    """Ethernet at ``rate_bps``: 8 bit times per byte (Hughes-Jones et al. 2003, §3.1: gigabit, 0.008 us/byte)."""
    if rate_bps <= 0:
        raise UsageError("Ethernet rate must be positive")
    rate = Fraction(rate_bps).limit_denominator(1000)
    label = next((f"Ethernet {k.upper()}" for k, v in ETHERNET_RATES_BPS.items() if v == rate_bps),
                 f"Ethernet {rate_bps / 1e9:g} Gbit/s")
    return PathElement(label, Fraction(8_000_000) / rate)


def memory_copy(mbytes_per_s: float) -> PathElement:
    """A memory-to-memory copy at ``mbytes_per_s`` (Hughes-Jones et al. 2003, §3.1 counts one at each end)."""
    if mbytes_per_s <= 0:
        raise UsageError("memory copy bandwidth must be positive")
    return PathElement(f"memory copy {mbytes_per_s:g} MB/s", 1 / Fraction(mbytes_per_s).limit_denominator(1000))


def expected_slope_us_per_byte(elements: list[PathElement], mode: Mode = "store-and-forward") -> Fraction:
    """Expected RTT slope (us/byte): the sum of inverse rates (store and forward), or the largest (cut-through)."""
    if not elements:
        raise UsageError("a path needs at least one element")
    if mode == "store-and-forward":
        return sum((e.us_per_byte for e in elements), Fraction(0))
    if mode == "cut-through":
        return max(e.us_per_byte for e in elements)
    raise UsageError(f"path mode must be store-and-forward or cut-through, not {mode!r}")


def significant(value: Fraction | float, digits: int = 3) -> Decimal:
    """``value`` rounded half-up to ``digits`` significant figures, as the seed's tables print them."""
    d = Decimal(value.numerator) / Decimal(value.denominator) if isinstance(value, Fraction) else Decimal(value)
    if d == 0:
        return Decimal(0)
    exponent = d.adjusted() - digits + 1
    return d.quantize(Decimal(1).scaleb(exponent), rounding=ROUND_HALF_UP).normalize()


_ELEMENT = re.compile(
    r"^(?:(?P<pci>pcix?)(?P<w>32|64)-(?P<mhz>\d+(?:\.\d+)?)"
    r"|pcie(?P<gen>\d)x(?P<lanes>\d+)(?::mps=(?P<mps>\d+))?"
    r"|(?:eth|ethernet)(?P<rate>100m|1g|10g|25g|100g)|gige"
    r"|memcpy:(?P<copy>\d+(?:\.\d+)?))$")


def parse_element(text: str) -> PathElement:
    """A path element from its short name: ``pci32-33``, ``pcix64-133``, ``pcie3x8:mps=256``, ``eth1g``
    (or ``gige``), ``eth100m`` .. ``eth100g``, ``memcpy:2000`` (MB/s)."""
    m = _ELEMENT.match(text.strip().lower())
    if not m:
        raise UsageError(f"path element {text!r}: expected pci32-33, pci64-66, pcix64-133, pcie3x8:mps=256, "
                         "eth1g (gige), eth10g, memcpy:2000 ...")
    if m["pci"]:
        return (pcix if m["pci"] == "pcix" else pci)(int(m["w"]), float(m["mhz"]))
    if m["gen"]:
        return pcie(int(m["gen"]), int(m["lanes"]), int(m["mps"] or 256))
    if m["copy"]:
        return memory_copy(float(m["copy"]))
    return ethernet(ETHERNET_RATES_BPS[m["rate"] or "1g"])


def parse_path(text: str) -> list[PathElement]:
    """Comma-separated elements, in the order a byte meets them: ``memcpy:1000,pci64-66,gige,pci64-66,memcpy:1000``."""
    parts = [p for p in text.split(",") if p.strip()]
    if not parts:
        raise UsageError("--path: give at least one element, e.g. pci64-66,gige,pci64-66")
    return [parse_element(p) for p in parts]


def element_from_bus(bus: dict) -> PathElement | None:
    """The path element a capture-set source's ``bus`` metadata describes (PCI or PCI-X), else None."""
    kind, width, clock = bus.get("kind"), bus.get("width_bits"), bus.get("clock_hz")
    if kind not in ("pci", "pcix") or not width or not clock:
        return None
    return (pcix if kind == "pcix" else pci)(int(width), float(clock) / 1e6)


@dataclass(frozen=True)
class ExpectedRow:
    """A row of Hughes-Jones et al. 2003's §3.1 table: an element's inverse rate, or a path's expected slope."""

    label: str
    us_per_byte: Fraction
    is_path: bool
    note: str = ""

    @property
    def printed(self) -> Decimal:
        """The value as Hughes-Jones et al. print it (three significant figures, half up)."""
        return significant(self.us_per_byte)


def hughes_jones_2003_slopes() -> list[ExpectedRow]:
    """Hughes-Jones et al. 2003, §3.1's table, computed: PCI - Gigabit Ethernet - PCI, store and forward, no copies."""
    gige = ethernet(1e9)
    rows = [ExpectedRow(e.name, e.us_per_byte, False) for e in (pci(32, 33), pci(64, 33), pci(64, 66), gige)]
    notes = {(64, 33): f"{HUGHES_JONES} label this row '64 bit 64 MHz'; by its arithmetic, 2 x 0.00375 + 0.008, "
                       "it is the 64-bit 33 MHz PCI case"}
    for width, mhz in ((32, 33), (64, 33), (64, 66)):
        bus = pci(width, mhz)
        rows.append(ExpectedRow(f"{bus.name} with Gigabit Ethernet", expected_slope_us_per_byte([bus, gige, bus]),
                                True, notes.get((width, mhz), "")))
    return rows


@dataclass(frozen=True)
class SlopeVerdict:
    """Observed against expected slope (Hughes-Jones et al. 2003, §4.1.1, 4.2.1, 4.3.1, 5.2.1, 6.2)."""

    observed_us_per_byte: float
    observed_ci95_us_per_byte: float
    expected_us_per_byte: float
    ratio: float
    excess_us_per_byte: float
    copy_mbytes_per_s_if_two_copies: float
    agrees: bool
    text: Sentence


def interpret_slope(observed_us_per_byte: float, ci95_us_per_byte: float,
                    expected_us_per_byte: float | Fraction, quote: tuple[str, str] = ("", "")) -> SlopeVerdict:
    """Compare a fitted slope with the path's expected one.

    Agreement: the expected value lies inside the 95% interval. An excess is
    read as Hughes-Jones et al. read it (§4.1.1, §5.2.1): memory copies at both
    ends, whose bandwidth the excess implies (two copies: 2 / excess bytes per
    us); a shortfall as steps in the curve or a path element faster than
    assumed (§6.2). ``quote``: the table and row (its first cell) the observed
    slope is printed in, which the sentence quotes.
    """
    from nicrig.analysis.latency import SLOPE, SLOPE_U
    from nicrig.analysis.sentence import Quotes

    expected = float(expected_us_per_byte)
    excess = observed_us_per_byte - expected
    ratio = observed_us_per_byte / expected if expected else float("nan")
    agrees = abs(excess) <= ci95_us_per_byte
    copy_bw = 2 / excess if excess > 0 else float("nan")
    q = Quotes()
    table, row = quote  # no table: the quotes name none, and the sentence is not a report's
    slope = q.measured(table, SLOPE, SLOPE_U, observed_us_per_byte, ci95_us_per_byte, "us/byte", row)
    obs = f"The observed slope, {slope},"
    want = f"{number(expected)} us/byte"
    if agrees:
        text = q.sentence(f"{obs} agrees with the {want} expected for the path (inside its 95% interval).",
                          given=[want])
    elif excess > 0:
        more, copies = f"{number(excess, ci95=ci95_us_per_byte)} us/byte", f"{number(copy_bw)} MB/s"
        text = q.sentence(f"{obs} is {number(ratio, decimals=2)} x the {want} expected: {more} more, as two memory "
                          f"copies at ~{copies} would add ({HUGHES_JONES}, §4.1.1), or data moved inside the NIC.",
                          given=[want, more, copies])
    else:
        text = q.sentence(f"{obs} is below the {want} expected: steps in the curve flatten the fit "
                          f"({HUGHES_JONES}, §6.2), or the path is faster than assumed (cut-through, wider bus).",
                          given=[want])
    return SlopeVerdict(observed_us_per_byte, ci95_us_per_byte, expected, ratio, excess, copy_bw, agrees, text)
