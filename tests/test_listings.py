"""Listings of logic analyzers and FPGAs: Vivado ILA (written by AMD's ChipScoPy), Saleae Logic 2, DSView.

Two kinds of input, never nicrig's own writer:

* small files typed out as the vendors document them (the Saleae support article's
  example, DSView's ``output/csv.c`` header, the ILA CSV's header and radix rows), with
  their quirks (Saleae's ``X`` and end row, DSView's blank before each name and ``%.15g``
  times, ChipScoPy's radix row without the GAP column's entry, legacy exports without
  a radix row, several capture windows);
* an independent PCI model (``tests/hdl/pci_bus_tb.v``, Icarus Verilog) whose capture is
  written as an ILA CSV by ChipScoPy and as Saleae and DSView CSVs in their documented
  layout: each decodes to the same transactions as the same capture read from the VCD.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from nicrig.acquisition import limits, textlines
from nicrig.acquisition.capture import CaptureSet, unpack_bits
from nicrig.acquisition.listing import ListingReader, cell_value, iso_ps, seconds_ps
from nicrig.acquisition.listing_formats import Field, recognise
from nicrig.cli import main
from nicrig.errors import FormatError, UsageError

HERE = Path(__file__).resolve().parent
CHIPSCOPY = Path(sys.prefix) / "chipscopy"
needs_chipscopy = pytest.mark.skipif(not (CHIPSCOPY / "chipscopy").is_dir(),
                                     reason="needs AMD's ChipScoPy in .venv/chipscopy: run make venv")
needs_iverilog = pytest.mark.skipif(not (shutil.which("iverilog") and shutil.which("vvp")),
                                    reason="needs Icarus Verilog: apt-get install iverilog")


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def imported(path: Path, out: Path, *args: str) -> dict:
    """``nicrig import PATH -o OUT --json ARGS`` run in this process; the JSON it printed."""
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(["import", str(path), "-o", str(out), "--json", *args]) == 0
    return json.loads(buf.getvalue())


def fails(capsys, *args: str) -> str:
    assert main(["import", *args]) == 2
    return capsys.readouterr().err


def bits(h5: Path, name: str) -> tuple[list[str], np.ndarray]:
    with CaptureSet.open(h5) as cs:
        s = cs.source(name)
        return list(s.channels), unpack_bits(s.read_packed(), len(s.channels))


# -- Saleae Logic 2 ---------------------------------------------------------------------------------------
#: The example of Saleae's "Binary and CSV Export Formats - Logic 2 - 2025 Update": a row at the start and
#: at every change, X where a channel has no data, and a last row of X where the capture ends.
SALEAE_DOC = """Time [s],Channel 0 :),Channel 1 :),Ch2
0.000000000,0,1,X
0.125000000,0,0,X
0.250000000,1,1,X
0.500000000,0,0,1
0.625000000,1,1,0
0.750000000,0,1,0
0.875000000,1,0,1
1.000000000,X,X,X
"""


def test_saleae_documented_example(tmp_path):
    out = imported(write(tmp_path / "digital.csv", SALEAE_DOC), tmp_path / "s.h5")
    src = out["source"]
    assert out["format"] == "saleae" and src["mode"] == "timing"
    assert src["samplerate_hz"] == 8 and src["num_samples"] == 8  # rows 1/8 s apart; the X row ends the capture
    names, b = bits(tmp_path / "s.h5", "digital")
    assert names == ["Channel 0 :)", "Channel 1 :)", "Ch2"]
    assert b[:, 0].tolist() == [0, 0, 1, 1, 0, 1, 0, 1]
    assert b[:, 1].tolist() == [1, 0, 1, 1, 0, 1, 1, 0]
    assert b[:, 2].tolist() == [0, 0, 0, 0, 1, 0, 0, 1]  # X read as 0 (the default)
    assert src["instrument"]["x_samples"] == {"Ch2": 3}
    assert "marks the end of the capture" in src["notes"]


def test_saleae_with_the_analyzers_rate_and_x_held(tmp_path):
    path = write(tmp_path / "digital.csv", SALEAE_DOC.replace("0.000000000,0,1,X", "0.000000000,0,1,1"))
    src = imported(path, tmp_path / "s.h5", "--sample-rate", "16", "--x-as", "hold")["source"]
    assert src["num_samples"] == 16 and src["samplerate_hz"] == 16  # up to the X row at 1 s, sample 16
    _, b = bits(tmp_path / "s.h5", "digital")
    assert b[:, 0].tolist() == [0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 1, 1, 0, 0, 1, 1]
    assert b[:, 2].tolist() == [1] * 8 + [1, 1, 0, 0, 0, 0, 1, 1]  # X holds the 1 of the first row


def test_saleae_real_export_shape_and_iso_times_give_the_same_samples(tmp_path):
    """Logic 2's own exports (Logic 8 at 50 MHz): 9 decimals, or ISO 8601 times to the nanosecond."""
    times = [0, 16460, 267100, 373100, 697220, 799020, 817820]  # ns, as in an export at 50 MHz
    rows = ["1,0", "0,1", "0,0", "1,0", "0,0", "0,1", "1,1"]
    plain = "Time [s],Channel 0,Channel 1\n" + "".join(f"{t / 1e9:.9f},{r}\n" for t, r in zip(times, rows))
    iso = "Time [s],Channel 0,Channel 1\n" + "".join(
        f"2022-06-24T18:51:08.{852112100 + t:09d}+00:00,{r}\n" for t, r in zip(times, rows))
    a = imported(write(tmp_path / "a.csv", plain), tmp_path / "a.h5")["source"]
    b = imported(write(tmp_path / "b.csv", iso), tmp_path / "b.h5")["source"]
    assert a["samplerate_hz"] == b["samplerate_hz"] == 50e6  # the GCD of the steps: 20 ns
    assert a["num_samples"] == b["num_samples"] == 817820 // 20 + 1
    assert np.array_equal(bits(tmp_path / "a.h5", "a")[1], bits(tmp_path / "b.h5", "b")[1])
    assert "2022-06-24T18:51:08+00:00 (+852112100000 ps)" in b["notes"]


# -- DSView -----------------------------------------------------------------------------------------------
def dsview_text(rate: str, names: list[str], rows: list[tuple[int, str]], rate_hz: float, start: int = 0) -> str:
    """A DSView CSV as libsigrok4DSL's output/csv.c writes it: comments, ' name' columns, %.15g times."""
    head = (f"; CSV, generated by DSView, sampled on 2026-11-28 10:00:00\n; Channels ({len(names)}/16)\n"
            f"; Sample rate: {rate}\n; Sample count: 1 M\nTime(s)," + ",".join(f" {n}" for n in names) + "\n")
    return head + "".join("%0.15g" % ((start + i) / rate_hz) + "," + r + "\n" for i, r in rows)


def test_dsview_header_rate_and_change_rows(tmp_path):
    text = dsview_text("100 MHz", ["0", "1", "CLK"], [(0, "1,0,0"), (1, "1,0,1"), (2, "0,1,0"), (5, "0,1,1")],
                       100e6)
    out = imported(write(tmp_path / "ds.csv", text), tmp_path / "d.h5")
    src = out["source"]
    assert out["format"] == "dsview" and src["samplerate_hz"] == 100e6 and src["num_samples"] == 6
    names, b = bits(tmp_path / "d.h5", "ds")
    assert names == ["0", "1", "CLK"] and src["roles"] == {"clk": "CLK"}
    assert b.T.tolist() == [[1, 1, 0, 0, 0, 0], [0, 0, 1, 1, 1, 1], [0, 1, 0, 0, 0, 1]]


def test_dsview_range_export_keeps_its_time_and_odd_rates_stay_exact(tmp_path):
    """A range exported from sample 123456789 on at 12.5 MHz (80 ns): times far from 0, no drift."""
    rows = [(0, "1"), (3, "0"), (1000003, "1")]
    text = dsview_text("12.5 MHz", ["D0"], rows, 12.5e6, start=123456789)
    src = imported(write(tmp_path / "r.csv", text), tmp_path / "r.h5")["source"]
    assert src["num_samples"] == 1000004
    with CaptureSet.open(tmp_path / "r.h5") as cs:
        s = cs.source("r")
        assert int(s.times_ps(0, 1)[0]) == 123456789 * 80000
        assert int(s.times_ps(1000003, 1000004)[0]) == (123456789 + 1000003) * 80000
        assert s.read_channel("D0", 1000002, 1000004).tolist() == [0, 1]


def test_dsview_row_off_its_own_grid_is_an_error_with_the_line(tmp_path, capsys):
    text = dsview_text("100 MHz", ["D0"], [(0, "1"), (1, "0")], 100e6) + "2.5e-08,1\n"
    err = fails(capsys, str(write(tmp_path / "bad.csv", text)), "-o", str(tmp_path / "x.h5"))
    assert "bad.csv:8: time 2.5e-08 is not on the 1e+08 Hz sample grid" in err
    assert not (tmp_path / "x.h5").exists()


# -- Vivado ILA -------------------------------------------------------------------------------------------
ILA = """Sample in Buffer,Sample in Window,TRIGGER,top/mon/FRAME_N,top/mon/AD[31:0],top/mon/CBE_N[3:0],top/st[2:0]
Radix - UNSIGNED,UNSIGNED,UNSIGNED,HEX,HEX,BINARY,SIGNED
0,0,0,1,00000000,1111,0
1,1,1,0,FE000010,0111,-1
2,2,0,0,DEADBEEF,0000,3
3,3,0,1,deadbeef,0000,-4
"""


def test_ila_radix_row_bus_bits_trigger_and_exact_clock(tmp_path):
    src = imported(write(tmp_path / "ila.csv", ILA), tmp_path / "i.h5", "--sample-rate", "33.333MHz")["source"]
    assert src["mode"] == "state" and src["trigger_sample"] == 1
    assert src["vectors"] == {"AD": 32, "CBE_N": 4, "st": 3}
    assert src["roles"] == {"ad": "AD", "cbe": "CBE_N", "frame": "FRAME_N"}
    with CaptureSet.open(tmp_path / "i.h5") as cs:
        s = cs.source("ila")
        assert s.read_vector("AD").tolist() == [0, 0xFE000010, 0xDEADBEEF, 0xDEADBEEF]
        assert s.read_vector("CBE_N").tolist() == [15, 7, 0, 0]
        assert s.read_vector("st").tolist() == [0, 7, 3, 4]  # signed, two's complement in 3 bits
        # 1 / 33.333 MHz = 30000.3 ps: each sample's time rounded from its exact time, the trigger at 0
        assert s.times_ps().tolist() == [-30000, 0, 30001, 60001]
    assert "probe names shortened" in src["notes"]


def test_ila_legacy_export_without_radix_row_is_hex(tmp_path):
    text = "\n".join(ILA.splitlines()[:1] + [r.rsplit(",", 2)[0] + ",F,0" for r in ILA.splitlines()[2:]]) + "\n"
    src = imported(write(tmp_path / "legacy.csv", text), tmp_path / "l.h5", "--sample-rate", "100MHz")["source"]
    assert "no radix row" in src["notes"] and src["num_samples"] == 4


def test_ila_needs_the_clock_and_a_window(tmp_path, capsys):
    path = write(tmp_path / "ila.csv", ILA)
    assert "give --sample-rate HZ, the ILA's clock" in fails(capsys, str(path), "-o", str(tmp_path / "x.h5"))
    two = ILA.replace("1,1,1,0,FE000010", "1,1,1,X,FE000010") + "4,0,0,1,00000001,0000,0\n5,1,1,1,00000002,0000,0\n"
    path = write(tmp_path / "two.csv", two)
    err = fails(capsys, str(path), "-o", str(tmp_path / "x.h5"), "--sample-rate", "1MHz")
    assert "two.csv:7: a second capture window starts here" in err and "--window" in err
    src = imported(path, tmp_path / "w.h5", "--sample-rate", "1MHz", "--window", "1")["source"]
    assert src["num_samples"] == 2 and src["trigger_sample"] == 1
    assert "capture window 1 of 2" in src["notes"] and src["instrument"]["x_samples"] == {}
    assert "holds 2 capture window(s)" in fails(capsys, str(path), "-o", str(tmp_path / "x.h5"),
                                                 "--sample-rate", "1MHz", "--window", "2")


def test_ila_gap_column_without_its_radix_and_gap_rows(tmp_path):
    """ChipScoPy's include_gap export: a GAP column the radix row has no entry for, X in the gap samples."""
    text = ("Sample in Buffer,Sample in Window,TRIGGER,GAP,valid,data[7:0]\n"
            "Radix - UNSIGNED,UNSIGNED,UNSIGNED,HEX,HEX\n"
            "0,0,1,0,1,A5\n1,1,0,1,X,XX\n2,2,0,0,0,3C\n")
    src = imported(write(tmp_path / "gap.csv", text), tmp_path / "g.h5", "--sample-rate", "250MHz",
                   "--x-as", "hold")["source"]
    assert src["instrument"]["x_samples"] == {"valid": 1, **{f"data[{k}]": 1 for k in range(8)}}
    with CaptureSet.open(tmp_path / "g.h5") as cs:
        s = cs.source("gap")
        assert s.read_vector("data").tolist() == [0xA5, 0xA5, 0x3C] and s.read_channel("valid").tolist() == [1, 1, 0]
        assert s.times_ps().tolist() == [0, 4000, 8000]


@pytest.mark.parametrize("row, match", [
    ("2,2,0,0,DEADBEEF,0000", "ila.csv:5: 6 fields, expected 7 (truncated line?)"),
    ("2,2,0,0,DEADBEEG,0000,3", "ila.csv:5: column 'top/mon/AD[31:0]': 'DEADBEEG' is not a hex value of 32 bit"),
    ("2,2,0,0,1DEADBEEF,0000,3", "'1DEADBEEF' is not a hex value of 32 bit"),
    ("2,2,0,0,DEADBEEF,0000,4", "column 'top/st[2:0]': '4' is not a decimal value of 3 bit"),
    ("7,2,0,0,DEADBEEF,0000,3", "ila.csv:5: sample 7 follows sample 1: rows missing or out of order"),
    ("2,2,0,0,0x12,0000,3", "'0x12' is not a hex value"),
])
def test_ila_damaged_rows_name_their_line(tmp_path, capsys, row, match):
    lines = ILA.splitlines()
    lines[4] = row
    err = fails(capsys, str(write(tmp_path / "ila.csv", "\n".join(lines) + "\n")), "-o", str(tmp_path / "x.h5"),
                "--sample-rate", "1MHz")
    assert match in err
    assert not (tmp_path / "x.h5").exists()


def test_ila_radix_that_loses_bits_is_refused(tmp_path, capsys):
    path = write(tmp_path / "ila.csv", ILA.replace("BINARY,SIGNED", "BINARY,ASCII"))
    assert "radix ASCII, which does not give its bits back" in fails(capsys, str(path), "-o",
                                                                      str(tmp_path / "x.h5"))


# -- recognition, errors, bounds ----------------------------------------------------------------------------
def test_recognition_by_content_and_a_clear_error_for_the_wrong_format(tmp_path, capsys):
    sal = write(tmp_path / "s.txt", SALEAE_DOC)
    assert recognise(sal).format == "saleae"
    assert recognise(write(tmp_path / "sig.csv", "Time,A,B\n0,1,0\n")) is None  # sigrok-style: csv_logic reads it
    err = fails(capsys, str(sal), "-o", str(tmp_path / "x.h5"), "--format", "ila")
    assert "not a Vivado ILA CSV export: its content is a Saleae Logic 2 digital CSV export" in err
    err = fails(capsys, str(write(tmp_path / "hex.csv", "Time,AD\n0,3F\n")), "-o", str(tmp_path / "x.h5"))
    assert "not recognised as a Vivado ILA CSV export, Saleae Logic 2 digital CSV export, DSView CSV export" in err
    assert "--window applies to ILA listings" in fails(capsys, str(sal), "-o", str(tmp_path / "x.h5"),
                                                        "--window", "0")
    assert "--clock apply to VCD input only" in fails(capsys, str(sal), "-o", str(tmp_path / "x.h5"),
                                                       "--clock", "CLK")


def test_time_going_back_and_bad_time(tmp_path, capsys):
    back = SALEAE_DOC.replace("0.250000000,1,1,X", "0.100000000,1,1,X")
    assert "s.csv:4: time 0.100000000 is not after the previous row's" in fails(
        capsys, str(write(tmp_path / "s.csv", back)), "-o", str(tmp_path / "x.h5"))
    for t, match in (("1e999999", "s.csv:4: time 1e999999 is beyond"), ("0.25s", "s.csv:4: bad time '0.25s'")):
        bad = SALEAE_DOC.replace("0.250000000,1,1,X", f"{t},1,1,X")
        assert match in fails(capsys, str(write(tmp_path / "s.csv", bad)), "-o", str(tmp_path / "x.h5"))


def test_a_line_without_end_is_refused_within_its_bound(tmp_path):
    path = tmp_path / "long.csv"
    path.write_bytes(b"Time [s],A\n0,1\n" + b"1" * (3 * textlines.READ_BYTES))
    with pytest.raises(FormatError, match=r"long.csv:3: a line longer than"):
        list(textlines.lines(path, max_bytes=limits.MAX_LINE_BYTES))
    assert [n for n, _ in textlines.lines(write(tmp_path / "crlf.csv", "\ufeffa\r\nb\r\n"))] == [1, 2]


def test_value_and_time_parsing_units():
    f = Field("AD[7:0]", "AD", [f"AD[{k}]" for k in range(8)], radix=16)
    assert cell_value("A5", f) == (0xA5, 0) and cell_value("aX", f) == (0xA0, 0x0F)
    assert cell_value("1A5", f) is None and cell_value("", f) is None
    assert cell_value("X", Field("n", "n", ["n[0]", "n[1]"], radix=10)) == (0, 3)
    assert seconds_ps("0.000016460") == 16_460_000 and seconds_ps("1e-08") == 10_000
    assert seconds_ps("nan") is None and seconds_ps("1e99") is None
    assert iso_ps("1970-01-01T00:00:01.5Z") == 1_500_000_000_000


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 40), st.integers(0, 7)), min_size=1, max_size=30),
       st.integers(1, 9), st.sampled_from(["saleae", "dsview"]))
def test_change_rows_expand_to_the_samples_they_came_from(steps, block, vendor):
    """Random 3-channel captures written as change rows come back sample for sample, whatever the block size."""
    idx = np.cumsum([0] + [d for d, _ in steps])
    values = [0] + [v for _, v in steps]
    want = np.repeat(np.array([[(v >> k) & 1 for k in range(3)] for v in values]), np.diff(np.r_[idx, idx[-1] + 1]),
                     axis=0)
    rows = [(int(i), ",".join(str((v >> k) & 1) for k in range(3))) for i, v in zip(idx, values)]
    with tempfile.TemporaryDirectory() as d:
        if vendor == "saleae":
            text = "Time [s],A,B,C\n" + "".join(f"{i * 4e-9:.9f},{r}\n" for i, r in rows)
        else:
            text = dsview_text("250 MHz", ["A", "B", "C"], rows, 250e6)
        path = write(Path(d) / "r.csv", text)
        reader = ListingReader(path, recognise(path), block_samples=block, sample_rate_hz=250e6)
        got = unpack_bits(np.concatenate([b for b, _ in reader.blocks()]), 3)
    assert np.array_equal(got, want)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 400), st.binary(min_size=1, max_size=12))
def test_damaged_listings_give_format_errors_only(cut, junk):
    """Any listing cut short or with bytes spliced in reads whole or fails with a FormatError or UsageError."""
    base = (ILA + "4,4,0,1,00000001,0000,1\n").encode()
    data = base[:cut] + junk + base[cut:]
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "x.csv"
        path.write_bytes(data)
        try:
            layout = recognise(path)
            if layout is not None:
                for _ in ListingReader(path, layout, sample_rate_hz=1e6).blocks():
                    pass
        except (FormatError, UsageError):
            pass


def test_block_streaming_cuts_runs_and_rows(tmp_path):
    """Blocks of 4 samples: a long run and many rows come out whole, nothing held beyond a block."""
    text = dsview_text("1 MHz", ["D0", "D1"], [(0, "1,0"), (9, "0,1"), (10, "1,1"), (11, "0,0")], 1e6)
    path = write(tmp_path / "b.csv", text)
    reader = ListingReader(path, recognise(path), block_samples=4)
    blocks = [b for b, _ in reader.blocks()]
    assert [len(b) for b in blocks] == [4, 4, 4]
    got = unpack_bits(np.concatenate(blocks), 2)
    assert got[:, 0].tolist() == [1] * 9 + [0, 1, 0] and got[:, 1].tolist() == [0] * 9 + [1, 1, 0]


# -- the same PCI capture through VCD and through listings ----------------------------------------------------
def nicrig(*args: object) -> str:
    r = subprocess.run([sys.executable, "-m", "nicrig", *map(str, args)], capture_output=True, text=True,
                       timeout=120, check=False)
    assert r.returncode == 0, f"nicrig {' '.join(map(str, args))}:\n{r.stdout}{r.stderr}"
    return r.stdout


def transactions(h5: Path, source: str, times: bool = True) -> list[dict]:
    nicrig("decode", h5)
    rows = [json.loads(x) for x in nicrig("events", h5, "--source", source, "--decoder", "pci", "--json").splitlines()]
    return rows if times else [{k: v for k, v in r.items() if k not in ("t_ns", "t_end_ns")} for r in rows]


@pytest.fixture(scope="module")
def pci_vcd(tmp_path_factory) -> Path:
    """The independent PCI model (tests/hdl/pci_bus_tb.v), outputs 2 ns after CLK rises, as a VCD."""
    if not (shutil.which("iverilog") and shutil.which("vvp")):
        pytest.skip("needs Icarus Verilog: apt-get install iverilog")
    work = tmp_path_factory.mktemp("pci_listing")
    tb = HERE / "hdl" / "pci_bus_tb.v"
    subprocess.run(["iverilog", "-g2005", "-I", str(tb.parent), "-o", str(work / "tb.vvp"), "-Ppci_bus_tb.TVAL=2",
                    str(tb)], check=True, capture_output=True, timeout=60)
    subprocess.run(["vvp", "-n", str(work / "tb.vvp"), f"+vcd={work / 'tb.vcd'}"], check=True, capture_output=True,
                   timeout=60, cwd=work)
    return work / "tb.vcd"


def ila_probes(channels: list[str]) -> list[list]:
    """ChipScoPy probes over nicrig's channel order: one bus probe per vector (its bits in a row), else 1 bit."""
    probes: list[list] = []
    for k, ch in enumerate(channels):
        stem, _, bit = ch.partition("[")
        if bit and bit != "0]":
            assert probes[-1][0] == f"tb/pci_mon/{stem}" and probes[-1][1] + probes[-1][2] == k
            probes[-1][2] += 1
        else:
            probes.append([f"tb/pci_mon/{stem}", k, 1, bool(bit)])
    return probes


@needs_chipscopy
@needs_iverilog
def test_pci_state_listing_from_chipscopy_decodes_as_the_vcd(pci_vcd, tmp_path):
    """The VCD sampled on CLK, written by ChipScoPy as an ILA CSV (two windows), imported: the same transactions."""
    ref = tmp_path / "vcd.h5"
    nicrig("import", pci_vcd, "-o", ref, "--clock", "CLK", "--source", "pci")
    want = transactions(ref, "pci", times=False)
    assert len(want) == 26
    with CaptureSet.open(ref) as cs:
        src = cs.source("pci")
        channels, packed = list(src.channels), src.read_packed()
    n = len(packed)
    spec = {"width": len(channels), "sample_count": 2 * n, "window_size": n, "trigger_position": [5, 9],
            "probes": ila_probes(channels)}
    (tmp_path / "w.json").write_text(json.dumps(spec))
    (tmp_path / "w.bin").write_bytes(np.concatenate([packed, packed]).tobytes())
    csv = tmp_path / "ila.csv"
    env = {**os.environ, "PYTHONPATH": str(CHIPSCOPY)}
    subprocess.run([sys.executable, str(HERE / "chipscopy_ila.py"), tmp_path / "w.json", tmp_path / "w.bin", csv],
                   check=True, env=env, capture_output=True, timeout=120)
    head = csv.read_text().splitlines()[:2]
    assert head[0].startswith("Sample in Buffer,Sample in Window,TRIGGER,tb/pci_mon/RST_N,")
    assert ",tb/pci_mon/AD[63:0],tb/pci_mon/CBE_N[7:0]," in head[0]
    assert head[1].startswith("Radix - UNSIGNED,UNSIGNED,UNSIGNED,HEX")
    h5 = tmp_path / "ila.h5"
    src = imported(csv, h5, "--sample-rate", "33.333333MHz", "--window", "1", "--source", "pci")["source"]
    assert src["bus"]["kind"] == "pci" and src["trigger_sample"] == 9 and src["num_samples"] == n
    assert np.array_equal(bits(h5, "pci")[1], unpack_bits(packed, len(channels)))
    assert transactions(h5, "pci", times=False) == want


def timing_reference(pci_vcd: Path, tmp_path: Path) -> tuple[Path, list[str], np.ndarray, float]:
    ref = tmp_path / "timing.h5"
    nicrig("import", pci_vcd, "-o", ref, "--source", "pci")
    with CaptureSet.open(ref) as cs:
        src = cs.source("pci")
        channels = list(src.channels)
        return ref, channels, unpack_bits(src.read_packed(), len(channels)), float(src.samplerate_hz)


def change_rows(b: np.ndarray) -> np.ndarray:
    """Sample indices of the first sample and of every change (what Saleae and DSView write rows for)."""
    return np.flatnonzero(np.r_[True, np.any(b[1:] != b[:-1], axis=1)])


@needs_iverilog
@pytest.mark.parametrize("vendor", ["saleae", "dsview"])
def test_pci_timing_listing_decodes_as_the_vcd(pci_vcd, tmp_path, vendor):
    """The VCD's every change, as a Saleae or DSView export of the same channels: the same transactions, times too."""
    ref, channels, b, rate = timing_reference(pci_vcd, tmp_path)
    want = transactions(ref, "pci")
    rows = change_rows(b)
    cells = [",".join(map(str, b[i])) for i in rows]
    if vendor == "saleae":
        text = "Time [s]," + ",".join(channels) + "\n" + "".join(
            f"{i / rate:.9f},{c}\n" for i, c in zip(rows, cells))
    else:
        text = dsview_text(f"{rate / 1e9:g} GHz" if rate >= 1e9 else f"{rate / 1e6:g} MHz", channels,
                           list(zip(rows.tolist(), cells)), rate)
    path = write(tmp_path / f"{vendor}.csv", text)
    src = imported(path, tmp_path / f"{vendor}.h5", "--source", "pci")["source"]
    assert src["samplerate_hz"] == rate and src["roles"]["clk"] == "CLK" and src["bus"]["kind"] == "pci"
    got = bits(tmp_path / f"{vendor}.h5", "pci")[1]
    assert np.array_equal(got, b[: len(got)]) and len(b) - len(got) == len(b) - 1 - rows[-1]
    assert transactions(tmp_path / f"{vendor}.h5", "pci") == want
