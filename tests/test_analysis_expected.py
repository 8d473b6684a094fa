"""Expected-slope calculator: seed 002 section 3.1's table digit for digit, PCIe/Ethernet/copy arithmetic, parsing."""

from __future__ import annotations

import json
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from nicrig.analysis import expected
from nicrig.errors import UsageError

SEED_FIGURES = json.loads(Path("/work/shared/reference/seed_figures.json").read_text()) \
    if Path("/work/shared/reference/seed_figures.json").exists() else None


def test_seed_002_section_3_1_table_is_reproduced_exactly():
    rows = expected.hughes_jones_2003_slopes()
    assert [str(r.printed) for r in rows] == ["0.0075", "0.00375", "0.00188", "0.008", "0.023", "0.0155", "0.0118"]
    assert [r.is_path for r in rows] == [False] * 4 + [True] * 3
    middle = rows[5]
    assert middle.label.startswith("PCI 64-bit 33 MHz")
    assert "64 bit 64 MHz" in middle.note and "64-bit 33 MHz" in middle.note
    # the exact values behind the printed ones: 3/400, 3/800, 3/1600 us/byte and 1/125 at 1 Gbit/s
    assert [r.us_per_byte for r in rows[:4]] == [Fraction(3, 400), Fraction(3, 800), Fraction(3, 1600),
                                                 Fraction(1, 125)]
    assert rows[6].us_per_byte == Fraction(47, 4000)  # 0.01175: printed 0.0118 (half up), not 0.0117


@pytest.mark.skipif(SEED_FIGURES is None, reason="the shared seed figures are not on this machine")
def test_table_agrees_with_the_reference_figures():
    ref = SEED_FIGURES["expected_slopes_us_per_byte_seed002_3_1"]
    printed = [float(r.printed) for r in expected.hughes_jones_2003_slopes()]
    assert printed == [ref["pci_32bit_33MHz"], ref["pci_64bit_33MHz"], ref["pci_64bit_66MHz"],
                       ref["gigabit_ethernet"], ref["path_pci32_33_gige_pci32_33"],
                       ref["path_pci64_33_gige_pci64_33"], ref["path_pci64_66_gige_pci64_66"]]


def test_nominal_clocks_are_recognised_from_measured_ones():
    assert expected.pci(64, 66.666667).us_per_byte == expected.pci(64, 66).us_per_byte == Fraction(3, 1600)
    assert expected.pcix(64, 133.333333).mbytes_per_s == pytest.approx(1066.67, rel=1e-5)
    assert expected.pcix(64, 100).name == "PCI-X 64-bit 100 MHz"
    assert expected.element_from_bus({"kind": "pci", "width_bits": 32, "clock_hz": 33.333333e6}).us_per_byte \
        == Fraction(3, 400)
    assert expected.element_from_bus({"kind": "gmii"}) is None


def test_ethernet_and_memory_copy():
    assert [float(expected.ethernet(r).us_per_byte) for r in (100e6, 1e9, 10e9, 25e9, 100e9)] == \
        [0.08, 0.008, 0.0008, 0.00032, 0.00008]
    assert expected.memory_copy(500).us_per_byte == Fraction(1, 500)


def test_pcie_counts_line_code_tlp_and_dllp_overheads():
    # gen 1 x1: 2.5 GT/s x 8/10 = 250 MB/s; MaxPayload 128 carries 128 of 128 + 8 + 16 + 2 x 8/4 bytes
    assert expected.pcie(1, 1, 128).mbytes_per_s == pytest.approx(250 * 128 / 156)
    # gen 3 x8: 8 GT/s x 128/130 x 8 lanes / 8 bits; MaxPayload 256, 3DW headers, ECRC
    eff = 256 / (256 + 8 + 12 + 4 + 4)
    assert expected.pcie(3, 8, 256, header_bytes=12, ecrc=True).mbytes_per_s == pytest.approx(8000 * 128 / 130 * eff)
    assert expected.pcie(5, 16, 512).mbytes_per_s > expected.pcie(4, 16, 512).mbytes_per_s


@given(st.sampled_from([1, 2, 3, 4, 5]), st.sampled_from(expected.PCIE_LANES),
       st.sampled_from(expected.PCIE_MAX_PAYLOADS[:-1]))
def test_pcie_is_faster_with_more_lanes_and_larger_payloads(gen, lanes, mps):
    base = expected.pcie(gen, lanes, mps).us_per_byte
    assert expected.pcie(gen, lanes, mps * 2).us_per_byte < base
    more = [n for n in expected.PCIE_LANES if n > lanes]
    if more:
        assert expected.pcie(gen, more[0], mps).us_per_byte < base


def test_store_and_forward_adds_and_cut_through_takes_the_slowest():
    path = expected.parse_path("memcpy:1000,pci64-66,gige,pci64-66,memcpy:1000")
    assert expected.expected_slope_us_per_byte(path) == Fraction(1, 1000) * 2 + Fraction(3, 1600) * 2 \
        + Fraction(1, 125)
    assert expected.expected_slope_us_per_byte(path, "cut-through") == Fraction(1, 125)


def test_significant_rounds_half_up():
    assert expected.significant(Fraction(1175, 100000)) == Decimal("0.0118")
    assert expected.significant(Fraction(3, 1600)) == Decimal("0.00188")
    assert expected.significant(0) == 0


def test_slope_interpretation_follows_the_seed():
    # 370DLE, SK-9843, 32/33: 0.0286 against 0.023 expected: memory copies (seed 002 4.1.1)
    v = expected.interpret_slope(0.0286, 0.001, Fraction(23, 1000))
    assert not v.agrees and v.excess_us_per_byte == pytest.approx(0.0056)
    assert v.copy_mbytes_per_s_if_two_copies == pytest.approx(2 / 0.0056)
    assert "memory copies" in v.text
    assert expected.interpret_slope(0.023, 0.001, Fraction(23, 1000)).agrees
    assert "steps" in expected.interpret_slope(0.009, 0.001, Fraction(47, 4000)).text  # P4DP6 Intel (6.2)


@pytest.mark.parametrize("text", ["", "pci", "pci16-33", "pcie9x4", "pcie3x3", "pcie3x8:mps=300", "eth2g",
                                  "memcpy:0", "memcpy:-5", "pci64-5000", ",,,"])
def test_bad_path_elements_say_what_is_wrong(text):
    with pytest.raises(UsageError):
        expected.parse_path(text)


@given(st.text(max_size=40))
def test_any_path_text_parses_or_is_refused_cleanly(text):
    try:
        elements = expected.parse_path(text)
    except UsageError:
        return
    assert elements and all(e.us_per_byte > 0 for e in elements)
