"""nicrig import / export: VCD, sigrok .sr and CSV round trips, an independent VCD, real peers, every error."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from nicrig.acquisition import csv_logic, srzip, vcd
from nicrig.acquisition.capture import CaptureSet, SourceSpec, pack_bits, unpack_bits
from nicrig.acquisition.csv_logic import CsvReader, parse_rate
from nicrig.acquisition.exporting import select_channels
from nicrig.acquisition.importing import (
    guess_roles,
    sanitize_channels,
    source_name_from,
)
from nicrig.acquisition.vcd import VcdReader, write_vcd

from nicrig.cli import main
from nicrig.errors import FormatError, UsageError
from tests.sigrok_run import DECODERS_DIR

SIGROK = shutil.which("sigrok-cli")
VCD2FST = shutil.which("vcd2fst")  # from the gtkwave package; optional

CHANNELS = ["FRAME#", "IRDY#", "TRDY#"] + [f"AD[{i}]" for i in range(32)] + \
    [f"C/BE#[{i}]" for i in range(4)] + ["PAR", "bus idle"]
ROLES = {"frame": "FRAME#", "irdy": "IRDY#", "ad": "AD", "cbe": "C/BE#"}
BUS = {"kind": "pci", "width_bits": 32, "clock_hz": 66.67e6}


def needs_sigrok(fn):
    fn = pytest.mark.skipif(SIGROK is None, reason="sigrok-cli not installed")(fn)
    return pytest.mark.sigrok(fn)


def bus_bits(n: int, nch: int, seed: int = 1) -> np.ndarray:
    """Bits that change now and then, like bus lines (random toggles, 10% per sample and channel)."""
    rng = np.random.default_rng(seed)
    return (np.cumsum(rng.random((n, nch)) < 0.1, axis=0) % 2).astype(np.uint8)


def make_set(path: Path, n: int = 2000) -> np.ndarray:
    """A set with a timing source (66.67 MHz, non-integer ps period) and a state source, same bits."""
    bits = bus_bits(n, len(CHANNELS))
    rng = np.random.default_rng(2)
    stamps = 10_000_000 + np.cumsum(rng.integers(14_000, 16_000, n)).astype(np.int64)
    with CaptureSet.create(path) as cs:
        w = cs.add_source(SourceSpec("tim", CHANNELS, "timing", samplerate_hz=66.67e6, trigger_sample=300,
                                     offset_ps=-1234, roles=ROLES, bus=BUS))
        w.append(pack_bits(bits))
        w = cs.add_source(SourceSpec("st", CHANNELS, "state", samplerate_hz=66.67e6, trigger_sample=17,
                                     offset_ps=5555, roles=ROLES, bus=BUS))
        w.append(pack_bits(bits), stamps)
    return bits


def cli(*args: str) -> int:
    return main([str(a) for a in args])


def cli_fails(capsys, *args: str) -> str:
    """Run a command that must fail as a user error: exit code 2, one line on stderr; return it."""
    capsys.readouterr()
    assert cli(*args) == 2
    err = capsys.readouterr().err
    assert err.startswith("nicrig: error: ") and err.count("\n") == 1, err
    return err


def assert_same_source(a, b, *, times: bool = True) -> None:
    assert b.channels == a.channels
    assert b.mode == a.mode
    assert np.array_equal(b.read_packed(), a.read_packed())
    if times:
        assert np.array_equal(b.times_ps(), a.times_ps())
        assert (b.samplerate_hz, b.trigger_sample, b.offset_ps) == (a.samplerate_hz, a.trigger_sample, a.offset_ps)
        assert b.roles == a.roles and b.bus == a.bus


def read_all(reader) -> tuple[np.ndarray, np.ndarray | None]:
    blocks = list(reader.blocks())
    packed = np.concatenate([b[0] for b in blocks])
    ts = np.concatenate([b[1] for b in blocks]) if blocks[0][1] is not None else None
    return packed, ts


# ---------------------------------------------------------------------------------------------
# round trips
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("source", ["tim", "st"])
def test_vcd_round_trip_is_exact(tmp_path, source, capsys):
    make_set(tmp_path / "a.h5")
    assert cli("export", tmp_path / "a.h5", "--source", source, "-o", tmp_path / "x.vcd") == 0
    text = (tmp_path / "x.vcd").read_text()
    assert "$timescale 1 ps $end" in text and "AD[31:0]" in text and "C/BE#[3:0]" in text
    assert "FRAME#" in text and "bus_idle" in text  # '#' kept; a blank is not allowed in a reference
    assert cli("import", tmp_path / "x.vcd", "-o", tmp_path / "b.h5", "--source", "back") == 0
    with CaptureSet.open(tmp_path / "a.h5") as a, CaptureSet.open(tmp_path / "b.h5") as b:
        assert_same_source(a.source(source), b.source("back"))
        assert b.source("back").read_vector("AD").tolist() == a.source(source).read_vector("AD").tolist()
    out = capsys.readouterr().out
    assert "wrote" in out and "imported" in out


def test_vcd_export_of_a_state_source_samples_right_with_setup_semantics(tmp_path):
    """The clock wire's rising edges are the samples; each sample's values are in place before its edge."""
    make_set(tmp_path / "a.h5", n=50)
    with CaptureSet.open(tmp_path / "a.h5") as cs:
        src = cs.source("st")
        write_vcd(tmp_path / "s.vcd", src)
        want = src.read_packed()
        times = src.times_ps()
    text = (tmp_path / "s.vcd").read_text()
    meta_line = next(line for line in text.splitlines() if vcd.META_TAG in line)
    meta = json.loads(meta_line.split(vcd.META_TAG, 1)[1].rsplit("$end", 1)[0])
    assert meta["clock"] == "CLK" and meta["mode"] == "state"
    # strip nicrig's comment: a foreign reader with --clock CLK sees the same samples
    (tmp_path / "plain.vcd").write_text(text.replace(meta_line, ""))
    packed, ts = read_all(VcdReader(tmp_path / "plain.vcd", clock="CLK"))
    assert np.array_equal(packed, want)
    assert np.array_equal(np.diff(ts), np.diff(times))


def test_sr_round_trip(tmp_path, capsys):
    make_set(tmp_path / "a.h5")
    assert cli("export", tmp_path / "a.h5", "--source", "tim", "-o", tmp_path / "t.sr") == 0
    assert cli("export", tmp_path / "a.h5", "--source", "st", "-o", tmp_path / "s.sr") == 0
    out = capsys.readouterr().out
    assert "nominal clock rate 66.67 MHz" in out and "uniform" in out
    assert cli("import", tmp_path / "t.sr", "-o", tmp_path / "b.h5") == 0
    assert cli("import", tmp_path / "s.sr", "-o", tmp_path / "b.h5", "--append") == 0
    with CaptureSet.open(tmp_path / "a.h5") as a, CaptureSet.open(tmp_path / "b.h5") as b:
        assert b.source_names == ["s", "t"]
        t, s = b.source("t"), b.source("s")
        assert_same_source(a.source("tim"), t, times=False)
        assert t.samplerate_hz == 66.67e6
        # the state source comes back in timing mode at its clock rate, the same samples
        assert s.mode == "timing" and s.samplerate_hz == 66.67e6
        assert np.array_equal(s.read_packed(), a.source("st").read_packed())
        # a .sr keeps no roles: guessed from the names again
        assert t.roles == {**ROLES, "trdy": "TRDY#", "par": "PAR"}
        assert t.bus == {"kind": "pci", "width_bits": 32}


def test_round_trip_of_wide_and_odd_channels(tmp_path):
    """A 70-bit vector, a one-bit vector, names with blanks and non-ASCII, a channel named like a vector."""
    chans = [f"W[{i}]" for i in range(70)] + ["V[0]", "µ probe", "a b", "a_b", "X"]
    bits = bus_bits(300, len(chans), seed=4)
    with CaptureSet.create(tmp_path / "w.h5") as cs:
        cs.add_source(SourceSpec("w", chans, samplerate_hz=1e9)).append(pack_bits(bits))
    with CaptureSet.open(tmp_path / "w.h5") as cs:
        s = write_vcd(tmp_path / "w.vcd", cs.source("w"))
        assert s["vectors"] == {"W": 70, "V": 1}
        assert set(s["renamed"].values()) == {"µ probe", "a b"}
        r = VcdReader(tmp_path / "w.vcd")
        packed, _ = read_all(r)
        assert r.channels == chans and np.array_equal(packed, cs.source("w").read_packed())


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 40), st.integers(1, 12), st.integers(0, 2**32 - 1), st.booleans(),
       st.sampled_from([1e9, 400e6, 66.67e6, 3e9]))
def test_random_bit_patterns_round_trip_through_vcd(n, nch, seed, state, rate):
    rng = np.random.default_rng(seed)
    bits = rng.integers(0, 2, size=(n, nch), dtype=np.uint8)
    names = [f"D{k}" for k in range(nch - nch // 2)] + [f"B[{k}]" for k in range(nch // 2)]
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "r.h5"
        with CaptureSet.create(p) as cs:
            if state:
                ts = np.cumsum(rng.integers(1, 5000, n)).astype(np.int64)
                cs.add_source(SourceSpec("r", names, "state", samplerate_hz=rate)).append(pack_bits(bits), ts)
            else:
                cs.add_source(SourceSpec("r", names, "timing", samplerate_hz=rate)).append(pack_bits(bits))
        with CaptureSet.open(p) as cs:
            src = cs.source("r")
            write_vcd(Path(d) / "r.vcd", src)
            r = VcdReader(Path(d) / "r.vcd")
            packed, ts_back = read_all(r)
            assert r.channels == names
            assert np.array_equal(unpack_bits(packed, nch), bits)
            if state:
                assert np.array_equal(ts_back - ts_back[0], src.times_ps() - src.times_ps(0, 1)[0])


# ---------------------------------------------------------------------------------------------
# an independent VCD
# ---------------------------------------------------------------------------------------------
INDEPENDENT = """\
$date today $end
$version some other simulator 1.0 $end
$comment two agents on one bus $end
$timescale 1 ns $end
$scope module tb $end
$var wire 1 ! clk $end
$var real 64 r temperature $end
$var event 1 e done $end
$scope module host $end
$var wire 1 " FRAME# $end
$var wire 8 # AD [7:0] $end
$var wire 4 $ data [0:3] $end
$upscope $end
$scope module dev $end
$var wire 1 % FRAME# $end
$var reg 1 & irdy_n $end
$var wire 1 ' AD [0] $end
$var wire 1 ( AD [1] $end
$upscope $end
$upscope $end
$enddefinitions $end
#0
$dumpvars
0!
1"
bxxxxxxxx #
b0011 $
z%
1&
0'
1(
r1.5 r
$end
#5
1!
0"
b1010 #
#10
0!
1e
b10z1 #
x&
#15
1!
$comment a comment among the changes $end
#20
0!
$dumpoff
x!
x"
bxxxxxxxx #
bxxxx $
x%
x&
x'
x(
$end
#30
$dumpon
0!
1"
b11111111 #
b1100 $
0%
0&
1'
0(
$end
#35
1!
#40
0!
"""
INDEPENDENT_NAMES = (["host.FRAME#"] + [f"host.AD[{i}]" for i in range(8)] + [f"data[{i}]" for i in range(4)]
                     + ["dev.FRAME#", "irdy_n", "dev.AD[0]", "dev.AD[1]"])


def row(frame, ad, data, dev_frame, irdy, dev_ad) -> list[int]:
    """One expected sample: ``data`` as data[0], data[1]... (declared [0:3]: leftmost is data[0])."""
    return [frame] + [(ad >> i) & 1 for i in range(8)] + list(data) + [dev_frame, irdy] + list(dev_ad)


@pytest.fixture
def independent(tmp_path) -> Path:
    p = tmp_path / "indep.vcd"
    p.write_text(INDEPENDENT)
    return p


def test_independent_vcd_with_clock_gives_the_values_before_each_edge(independent, tmp_path, capsys):
    assert cli("import", independent, "-o", tmp_path / "i.h5", "--clock", "clk") == 0
    with CaptureSet.open(tmp_path / "i.h5") as cs:
        s = cs.source("indep")
        assert s.mode == "state" and s.channels == INDEPENDENT_NAMES
        assert s.vectors == {"host.AD": [f"host.AD[{i}]" for i in range(8)],
                             "data": [f"data[{i}]" for i in range(4)], "dev.AD": ["dev.AD[0]", "dev.AD[1]"]}
        # edges at 5, 15 and 35 ns; each sees the values of the times before it: none of the
        # changes at 5 ns is visible at the 5 ns edge; the clock's x -> 0 in $dumpon is no edge
        assert s.times_ps().tolist() == [5000, 15000, 35000]
        want = [
            row(1, 0x00, (0, 0, 1, 1), 1, 1, (0, 1)),  # AD x -> 0, dev FRAME# z -> 1
            row(0, 0x0B, (0, 0, 1, 1), 1, 0, (0, 1)),  # AD 0000_10z1 -> 0x0B, irdy_n x -> 0
            row(1, 0xFF, (1, 1, 0, 0), 0, 0, (1, 0)),  # after $dumpon
        ]
        assert unpack_bits(s.read_packed(), len(s.channels)).tolist() == want
        assert s.read_vector("host.AD").tolist() == [0, 0x0B, 0xFF]
        assert s.instrument["x_samples"] == {**{f"host.AD[{i}]": 1 for i in range(8)}, "irdy_n": 1}
        assert s.instrument["z_samples"] == {"dev.FRAME#": 2, "host.AD[1]": 1}
        assert s.instrument["clock"] == "clk" and s.instrument["x_as"] == "0" and s.instrument["z_as"] == "1"
        assert "9 x samples" in s.notes and "3 z samples" in s.notes
        assert "temperature (real)" in s.notes and "done (event)" in s.notes
        assert "scope prefix" in s.notes and "dumping was off" in s.notes
        assert s.samplerate_hz == pytest.approx(1e12 / 15000)
    out = capsys.readouterr().out
    assert "role 'frame' left unset" in out  # host.FRAME# and dev.FRAME# both fit


def test_independent_vcd_x_and_z_policies(independent):
    packed, _ = read_all(VcdReader(independent, clock="clk", x_as="hold", z_as="0"))
    got = unpack_bits(packed, len(INDEPENDENT_NAMES)).tolist()
    assert got == [
        row(1, 0x00, (0, 0, 1, 1), 0, 1, (0, 1)),  # AD held from its (x) start: 0; z -> 0
        row(0, 0x09, (0, 0, 1, 1), 0, 1, (0, 1)),  # irdy_n x holds its 1; AD[1] z -> 0
        row(1, 0xFF, (1, 1, 0, 0), 0, 0, (1, 0)),
    ]
    packed, _ = read_all(VcdReader(independent, clock="clk", x_as="1", z_as="hold"))
    got = unpack_bits(packed, len(INDEPENDENT_NAMES)).tolist()
    assert got[0] == row(1, 0xFF, (0, 0, 1, 1), 1, 1, (0, 1))  # AD x -> 1; FRAME# z holds its (x -> 1) start
    assert got[1] == row(0, 0x0B, (0, 0, 1, 1), 1, 1, (0, 1))  # AD[1] z holds its 1; irdy_n x -> 1


def test_independent_vcd_in_timing_mode(independent):
    r = VcdReader(independent)
    packed, ts = read_all(r)
    assert ts is None and r.samplerate_hz == 200e6  # times 0, 5, ..., 40 ns: GCD 5 ns
    assert r.channels == ["clk"] + INDEPENDENT_NAMES  # the clock is a channel in timing mode
    bits = unpack_bits(packed, len(r.channels))
    assert len(bits) == 9  # samples at 0, 5, ..., 40 ns
    assert bits[:, 0].tolist() == [0, 1, 0, 1, 0, 0, 0, 1, 0]  # clk; x during $dumpoff -> 0
    assert bits[1, 1:10].tolist() == [0] + [(0x0A >> i) & 1 for i in range(8)]  # at 5 ns: the new values
    assert r.stats["samples"] == 9
    # a given rate: samples at 0, 2.5, 5, ... ns; a change lands on the first sample at or after it
    r = VcdReader(independent, sample_rate_hz=400e6)
    packed, _ = read_all(r)
    assert len(packed) == 17 and unpack_bits(packed, len(r.channels))[:, 0].tolist() == \
        [0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 1, 1, 0]


def test_scope_selection(independent, tmp_path, capsys):
    err = cli_fails(capsys, "import", independent, "-o", tmp_path / "s.h5", "--scope", "host", "--clock", "clk")
    assert "no signal 'clk'" in err  # the clock is outside the scope
    assert cli("import", independent, "-o", tmp_path / "s.h5", "--scope", "tb.host", "--sample-rate", "200M") == 0
    with CaptureSet.open(tmp_path / "s.h5") as cs:
        s = cs.source("indep")
        assert s.channels == ["FRAME#"] + [f"AD[{i}]" for i in range(8)] + [f"data[{i}]" for i in range(4)]
        assert s.roles == {"frame": "FRAME#", "ad": "AD"}
    assert "no scope 'hots' (scopes: tb.host" in cli_fails(capsys, "import", independent, "-o", tmp_path / "s.h5",
                                                            "--scope", "hots", "--force")
    two = tmp_path / "two.vcd"
    two.write_text("$timescale 1 ns $end\n$scope module a $end\n$scope module pci $end\n$var wire 1 ! X $end\n"
                   "$upscope $end\n$upscope $end\n$scope module b $end\n$scope module pci $end\n"
                   "$var wire 1 \" X $end\n$upscope $end\n$upscope $end\n$enddefinitions $end\n#0\n0!\n1\"\n#1\n")
    with pytest.raises(UsageError, match=r"scope 'pci' is ambiguous: a\.pci, b\.pci"):
        VcdReader(two, scope="pci")
    r = VcdReader(two, scope="b.pci")
    assert r.channels == ["X"] and unpack_bits(read_all(r)[0], 1).ravel().tolist() == [1, 1]
    assert VcdReader(two).channels == ["a.pci.X", "b.pci.X"]  # the shortest trailing scope path that tells


def test_vector_declarations(tmp_path):
    """Reversed ranges, offset ranges, bit-blasted bits, integer vars, short values, aliases."""
    p = tmp_path / "v.vcd"
    p.write_text("""$timescale 10 ps $end
$scope module m $end
$var wire 4 ! rev [0:3] $end
$var wire 4 " hi [7:4] $end
$var wire 1 # bb [1] $end
$var wire 1 $ bb [0] $end
$var integer 8 % count $end
$var wire 1 & one $end
$var wire 1 & alias $end
$upscope $end
$enddefinitions $end
#0
b1000 !
b1 "
1#
0$
b101 %
1&
#1
b0001 !
bx "
b11 %
b0 &
#2
""")
    r = VcdReader(p, x_as="1")
    packed, _ = read_all(r)
    assert r.channels == ([f"rev[{i}]" for i in range(4)] + [f"hi[{i}]" for i in range(4)] + ["bb[1]", "bb[0]"]
                          + [f"count[{i}]" for i in range(8)] + ["one", "alias"])
    assert r.samplerate_hz == 1e11  # 10 ps timescale, changes 1 unit apart
    bits = unpack_bits(packed, len(r.channels))
    assert bits.shape == (3, 20)
    assert bits[0, :4].tolist() == [1, 0, 0, 0]  # rev[0] is the leftmost character
    assert bits[1, :4].tolist() == [0, 0, 0, 1]
    assert bits[0, 4:8].tolist() == [1, 0, 0, 0] and bits[1, 4:8].tolist() == [1, 1, 1, 1]  # bx: all x
    assert bits[0, 8:10].tolist() == [1, 0]
    assert bits[0, 10:18].tolist() == [1, 0, 1, 0, 0, 0, 0, 0] and bits[1, 10:18].tolist() == [1, 1, 0, 0, 0, 0, 0, 0]
    assert bits[:, 18:].tolist() == [[1, 1], [0, 0], [0, 0]]  # one identifier drives both
    assert any("hi[7:4] imported as hi[3:0]" in n for n in r.notes)


def test_clock_sharing_its_identifier_with_another_variable(tmp_path):
    p = tmp_path / "alias.vcd"
    p.write_text("$timescale 1 ns $end\n$scope module tb $end\n$var wire 1 ! clk $end\n$var wire 1 \" d $end\n"
                 "$scope module dut $end\n$var wire 1 ! clk $end\n$upscope $end\n$upscope $end\n$enddefinitions $end\n"
                 "#0\n0!\n0\"\n#5\n1!\n1\"\n#10\n0!\n#15\n1!\n#20\n0!\n")
    r = VcdReader(p, clock="dut.clk")  # declared after tb.clk, same identifier: still the clock
    packed, ts = read_all(r)
    assert r.channels == ["tb.clk", "d"] and ts.tolist() == [5000, 15000]
    assert unpack_bits(packed, 2).tolist() == [[0, 0], [0, 1]]  # tb.clk too is read just before the edge


def test_sample_count_cap_and_derived_rate(tmp_path):
    p = tmp_path / "fine.vcd"
    p.write_text("$timescale 1 ps $end\n$var wire 1 ! a $end\n$enddefinitions $end\n#0\n0!\n#1\n1!\n#2\n0!\n"
                 "#5000000000\n")
    with pytest.raises(UsageError, match=r"5,000,000,001 samples.*--sample-rate.*--clock"):
        read_all(VcdReader(p))
    r = VcdReader(p, sample_rate_hz=1e3)  # one sample per ns: the 1 ps pulse falls between samples
    packed, _ = read_all(r)
    assert unpack_bits(packed, 1).ravel().tolist() == [0] * 6
    assert "1 change time(s) fell between two samples" in "; ".join(r.summary_notes())
    q = tmp_path / "flat.vcd"
    q.write_text("$timescale 1 ns $end\n$var wire 1 ! a $end\n$enddefinitions $end\n#0\n1!\n")
    with pytest.raises(UsageError, match="--sample-rate"):
        read_all(VcdReader(q))
    assert unpack_bits(read_all(VcdReader(q, sample_rate_hz=1e6))[0], 1).tolist() == [[1]]


# ---------------------------------------------------------------------------------------------
# errors
# ---------------------------------------------------------------------------------------------
HEAD = "$timescale 1 ns $end\n$scope module m $end\n$var wire 1 ! clk $end\n$var wire 4 \" d [3:0] $end\n" \
       "$upscope $end\n$enddefinitions $end\n"


@pytest.mark.parametrize("body, match", [
    ("#0\n0!\nb0101 \"\n#5\n1!\nb01", r"t\.vcd:12: file ends inside the value change 'b01'.*truncated"),
    ("#0\n0!\nb0101 \"\n#5\n1!\nb0110 ", r"t\.vcd:12: file ends inside the value change"),
    ("#0\n0!\n#5\n1", r"t\.vcd:10: value '1' without an identifier"),
    ("#0\n$dumpvars\n0!\n", r"t\.vcd:8: file ends inside \$dumpvars"),
    ("#0\n0!\n#5\n1?\n", r"t\.vcd:10: value change for undeclared identifier"),
    ("#10\n0!\n#5\n1!\n", r"t\.vcd:9: time goes backwards: #5 after #10"),
    ("#0\n0!\nb012 \"\n", r"t\.vcd:9: bad vector value"),
    ("#0\n0!\nb11111 \"\n", r"t\.vcd:9: value 'b11111' is wider than its 4-bit variable"),
    ("#0\n0!\n%%%\n", r"t\.vcd:9: cannot read '%%%'"),
    ("#0\n0!\nhello\n", r"t\.vcd:9: value change for undeclared identifier 'ello'"),  # h: a weak 1
    ("#0\n$var wire 1 # e $end\n", r"t\.vcd:8: unexpected \$var"),
    ("#x1\n", r"t\.vcd:7: bad time"),
])
def test_vcd_errors_name_file_and_line(tmp_path, body, match):
    p = tmp_path / "t.vcd"
    p.write_text(HEAD + body)
    with pytest.raises(FormatError, match=match):
        read_all(VcdReader(p, clock="clk"))


@pytest.mark.parametrize("text, match", [
    (b"", r"g\.vcd:0: is empty"),
    (b"\x89PNG\r\n\x1a\n\x00\x00binary", r"g\.vcd:1: not a VCD file"),
    (b"hello world\n", r"g\.vcd:1: not a VCD file: starts with 'hello'"),
    (b"$timescale 1 ns $end\n$var wire 1 ! a $end\n", r"g\.vcd:2: ends before \$enddefinitions"),
    (b"$timescale 1 ns $end\n$var wire 1 ! a\n$enddefinitions $end\n", r"g\.vcd:3: "),
    (b"$timescale 1 ns $end\n$var blob 1 ! a $end\n$enddefinitions $end\n", r"g\.vcd:2: Invalid \$var type"),
    (b"$var wire 1 ! a $end\n$enddefinitions $end\n#0\n1!\n", r"no \$timescale"),
    (b"$timescale 100 fs $end\n$var wire 1 ! a $end\n$enddefinitions $end\n", r"g\.vcd:1: .*finer than 1 ps"),
    (b"$timescale 1 ns $end\n$upscope $end\n$enddefinitions $end\n", r"g\.vcd:2: \$upscope without"),
    (b"$timescale 1 ns $end\n$var real 64 ! t $end\n$enddefinitions $end\n", r"no logic variables"),
])
def test_garbage_and_broken_headers(tmp_path, text, match):
    p = tmp_path / "g.vcd"
    p.write_bytes(text)
    with pytest.raises(FormatError, match=match):
        VcdReader(p)


def test_unknown_clock_lists_close_names(independent):
    with pytest.raises(UsageError, match=r"no signal 'clock' for --clock; close names: clk"):
        VcdReader(independent, clock="clock")
    with pytest.raises(UsageError, match=r"ambiguous.*tb\.host\.FRAME#.*tb\.dev\.FRAME#"):
        VcdReader(independent, clock="FRAME#")
    with pytest.raises(UsageError, match="8 bits wide"):
        VcdReader(independent, clock="host.AD")
    assert VcdReader(independent, clock="tb.dev.FRAME#").clock == "tb.dev.FRAME#"
    p = independent.with_name("noclk.vcd")
    p.write_text(HEAD + "#0\n1!\n#5\n0!\n")
    with pytest.raises(FormatError, match="never rises"):
        read_all(VcdReader(p, clock="clk"))


def test_cli_exit_codes(tmp_path, independent):
    bad = tmp_path / "bad.vcd"
    bad.write_text(HEAD + "#0\n0!\nb01")
    run = [sys.executable, "-m", "nicrig", "import"]
    r = subprocess.run(run + [str(bad), "-o", str(tmp_path / "o.h5")], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stderr.startswith("nicrig: error: ") and "bad.vcd:9:" in r.stderr
    assert not (tmp_path / "o.h5").exists() and not list(tmp_path.glob(".o.h5*"))
    r = subprocess.run(run + [str(independent), "-o", str(tmp_path / "o.h5"), "--clock", "clck"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "close names: clk" in r.stderr and not (tmp_path / "o.h5").exists()
    r = subprocess.run(run + [str(independent), "-o", str(tmp_path / "o.h5"), "--clock", "clk"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([sys.executable, "-m", "nicrig", "export", str(tmp_path / "o.h5"), "-o",
                        str(tmp_path / "o.txt")], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "use .sr, .vcd, .pcapng or .pcap" in r.stderr


def test_usage_errors(tmp_path, independent, capsys):
    make_set(tmp_path / "a.h5", n=20)
    (tmp_path / "x.csv").write_text("a\n1\n")
    cases = [
        (["import", tmp_path / "a.h5", "-o", tmp_path / "b.h5"], "unknown extension '.h5'"),
        (["import", tmp_path / "x.csv", "-o", tmp_path / "b.h5", "--clock", "c"], "--clock apply to VCD input only"),
        (["import", independent, "-o", tmp_path / "b.h5", "--sample-rate", "fast"], "bad sample rate 'fast'"),
        (["import", independent, "-o", tmp_path / "b.h5", "--sample-rate", "1M", "--clock", "clk"],
         "exclude each other"),
        (["import", independent, "-o", tmp_path / "a.h5", "--append", "--source", "tim"],
         "already has a source 'tim'"),
        (["import", independent, "-o", tmp_path / "none.h5", "--append"], "none.h5: no such file"),
        (["import", tmp_path / "nope.vcd", "-o", tmp_path / "b.h5"], "nope.vcd: no such file"),
        (["import", independent, "-o", tmp_path / "b.h5", "--source", "9 lives"], "source name '9 lives'"),
        (["export", tmp_path / "a.h5", "-o", tmp_path / "x.vcd"], "has 2 sources (st, tim): give --source"),
        (["export", tmp_path / "a.h5", "--source", "tim", "-o", tmp_path / "no" / "x.vcd"], "does not exist"),
        (["export", tmp_path / "a.h5", "--source", "nope", "-o", tmp_path / "x.vcd"], "no source 'nope'"),
        (["export", independent, "--source", "s", "-o", tmp_path / "x.vcd"], "not a readable HDF5 file"),
    ]
    for argv, msg in cases:
        assert msg in cli_fails(capsys, *argv), argv
    assert not (tmp_path / "b.h5").exists() and not (tmp_path / "x.vcd").exists()
    with CaptureSet.open(tmp_path / "a.h5") as cs:
        assert cs.source_names == ["st", "tim"]


def test_failed_append_leaves_the_set_as_it_was(tmp_path, monkeypatch, capsys):
    """An error found after blocks were appended: the set is as it was, byte for byte (the import went to a copy)."""
    make_set(tmp_path / "a.h5", n=20)
    p = tmp_path / "late.vcd"
    p.write_text(HEAD + "".join(f"#{10 * i}\n1!\nb{i % 16:b} \"\n#{10 * i + 5}\n0!\n" for i in range(1, 40)) + "b01")
    monkeypatch.setattr(vcd, "BLOCK_SAMPLES", 4)
    before = (tmp_path / "a.h5").read_bytes()
    assert "late.vcd:202: file ends inside the value change 'b01'" in \
        cli_fails(capsys, "import", p, "-o", tmp_path / "a.h5", "--append", "--clock", "clk")
    with CaptureSet.open(tmp_path / "a.h5") as cs:
        assert cs.source_names == ["st", "tim"]
    assert (tmp_path / "a.h5").read_bytes() == before and not list(tmp_path.glob(".a.h5*"))
    assert "truncated" in cli_fails(capsys, "import", p, "-o", tmp_path / "new.h5", "--clock", "clk")
    assert not (tmp_path / "new.h5").exists() and not list(tmp_path.glob(".new.h5*"))


# ---------------------------------------------------------------------------------------------
# CSV
# ---------------------------------------------------------------------------------------------
SIGROK_CSV = """; CSV generated by libsigrok 0.5.2
; from Demo driver and pattern generator on Sat Nov 21 08:18:01 2026
; Channels (3/13): FRAME#, IRDY#, D2
; Samplerate: 200 kHz
logic,logic,logic
1,0,0
0,1,1
0,1,1
1,0,1
"""


def test_csv_in_sigrok_style(tmp_path, capsys):
    p = tmp_path / "s.csv"
    p.write_text(SIGROK_CSV)
    assert cli("import", p, "-o", tmp_path / "c.h5") == 0
    with CaptureSet.open(tmp_path / "c.h5") as cs:
        s = cs.source("s")
        assert s.channels == ["FRAME#", "IRDY#", "D2"] and s.samplerate_hz == 200e3 and s.mode == "timing"
        assert unpack_bits(s.read_packed(), 3).tolist() == [[1, 0, 0], [0, 1, 1], [0, 1, 1], [1, 0, 1]]
        assert "Samplerate" in s.notes and s.instrument["format"] == "csv"


def test_csv_time_column_header_and_dedup(tmp_path):
    p = tmp_path / "t.csv"  # rows only at changes: the gaps hold the previous row
    p.write_text("Time [ns],FRAME_N,AD[1],AD[0]\n100,1,0,0\n110,0,1,1\n140,1,1,0\n")
    r = CsvReader(p)
    packed, _ = read_all(r)
    assert r.samplerate_hz == 1e8 and r.channels == ["FRAME_N", "AD[1]", "AD[0]"]
    assert unpack_bits(packed, 3).tolist() == [[1, 0, 0], [0, 1, 1], [0, 1, 1], [0, 1, 1], [1, 1, 0]]
    q = tmp_path / "u.csv"  # sigrok's time=true output: a spelled-out unit, a rate comment
    q.write_text("; Samplerate: 3 MHz\nnanoseconds,logic\n333,1\n666,0\n999,0\n1332,1\n")
    r = CsvReader(q)
    assert r.samplerate_hz == 3e6 and unpack_bits(read_all(r)[0], 1).ravel().tolist() == [1, 0, 0, 1]
    w = tmp_path / "w.csv"  # no header, a time column in seconds, tab separated
    w.write_text("0.0\t1\t0\n0.000001\t0\t0\n0.000002\t1\t1\n")
    r = CsvReader(w)
    assert len(read_all(r)[0]) == 3 and r.channels == ["D0", "D1"] and r.samplerate_hz == 1e6


def test_csv_errors(tmp_path):
    cases = {
        "norate.csv": ("A,B\n1,0\n0,1\n", UsageError, r"no sample rate.*--sample-rate"),
        "bad.csv": ("A,B\n1,0\n0,2\n", FormatError, r"bad\.csv:3: '2' is not 0 or 1"),
        "short.csv": ("; c\nA,B\n1,0\n0\n", FormatError, r"short\.csv:4: 1 fields, expected 2 \(truncated"),
        "back.csv": ("t_us,A\n1,0\n3,1\n2,1\n", FormatError, r"back\.csv:4: time 2 is not after"),
        "empty.csv": ("; only comments\n", FormatError, r"empty CSV"),
        "bin.csv": (b"\xff\xfe\x00garbage", FormatError, r"not a text CSV"),
    }
    for name, (text, exc, match) in cases.items():
        p = tmp_path / name
        p.write_bytes(text if isinstance(text, bytes) else text.encode())
        with pytest.raises(exc, match=match):
            read_all(CsvReader(p, sample_rate_hz=None if name == "norate.csv" else 1e6))
    r = CsvReader(tmp_path / "norate.csv", sample_rate_hz=1e6)
    assert unpack_bits(read_all(r)[0], 2).tolist() == [[1, 0], [0, 1]]


# ---------------------------------------------------------------------------------------------
# naming, roles, channel selection
# ---------------------------------------------------------------------------------------------
def test_roles_from_names():
    pci = ["frame_n", "IRDY#", "trdy_l", "DEVSEL#", "STOP#", "PAR", "REQ64#", "ACK64#", "GNT#", "REQ#", "INTA#",
           "CLK"] + [f"ad[{i}]" for i in range(32)] + [f"C_BE[{i}]" for i in range(4)]
    roles, kind, notes = guess_roles(pci)
    assert kind == "pci" and not notes
    assert roles == {"frame": "frame_n", "irdy": "IRDY#", "trdy": "trdy_l", "devsel": "DEVSEL#", "stop": "STOP#",
                     "par": "PAR", "req64": "REQ64#", "ack64": "ACK64#", "gnt": "GNT#", "req": "REQ#",
                     "inta": "INTA#", "clk": "CLK", "ad": "ad", "cbe": "C_BE"}
    gmii = ["TX_EN", "TX_ER", "RX_DV", "RX_ER"] + [f"TXD[{i}]" for i in range(8)] + [f"rxd[{i}]" for i in range(8)]
    roles, kind, _ = guess_roles(gmii)
    assert kind == "gmii" and roles == {"tx_en": "TX_EN", "tx_er": "TX_ER", "rx_dv": "RX_DV", "rx_er": "RX_ER",
                                        "txd": "TXD", "rxd": "rxd"}
    assert guess_roles(["D0", "D1"]) == ({}, None, [])
    assert guess_roles(["FRAME#", "AD"])[0] == {"frame": "FRAME#"}  # a one-bit 'AD' is no AD bus


def test_names():
    assert source_name_from(Path("run 7.vcd")) == "run_7" and source_name_from(Path("2x.sr")) == "_2x"
    assert sanitize_channels(["A[1]", "A[2]", "B[0]", "B[2]", "C[0]"]) == (
        ["A[0]", "A[1]", "B_0", "B_2", "C[0]"],
        ["A[2:1] imported as A[1:0]", "B has gaps in its bit numbers: imported as single channels B_<k>"])
    assert parse_rate("66.67MHz") == 66.67e6 and parse_rate("200k") == 2e5 and parse_rate("1e9") == 1e9
    with pytest.raises(UsageError):
        parse_rate("-5")


def test_channel_selection(tmp_path, capsys):
    make_set(tmp_path / "a.h5", n=100)
    with CaptureSet.open(tmp_path / "a.h5") as cs:
        s = cs.source("tim")
        assert select_channels(s, "IRDY#,FRAME#") == ["FRAME#", "IRDY#"]  # always in the source's order
        assert select_channels(s, "C/BE#, PAR") == [f"C/BE#[{i}]" for i in range(4)] + ["PAR"]
        assert select_channels(s, "AD[[]1*") == ["AD[1]"] + [f"AD[{i}]" for i in range(10, 20)]
        assert select_channels(s, "*#") == ["FRAME#", "IRDY#", "TRDY#"] + [f"C/BE#[{i}]" for i in range(4)]
        assert select_channels(s, "C*") == [f"C/BE#[{i}]" for i in range(4)]  # a glob over vector names
        with pytest.raises(UsageError, match="'FRAM' matches nothing; close names: FRAME#"):
            select_channels(s, "FRAM")
    assert cli("export", tmp_path / "a.h5", "--source", "tim", "-o", tmp_path / "p.vcd",
               "--channels", "FRAME#,AD[[]1*") == 0
    packed, _ = read_all(VcdReader(tmp_path / "p.vcd"))
    with CaptureSet.open(tmp_path / "a.h5") as cs:
        s = cs.source("tim")
        want = np.stack([s.read_channel(c) for c in ["FRAME#", "AD[1]"] + [f"AD[{i}]" for i in range(10, 20)]], 1)
    assert np.array_equal(unpack_bits(packed, 12), want)
    # the 64-channel note: a warning, or an error with --strict
    chans = [f"D{i}" for i in range(70)]
    with CaptureSet.create(tmp_path / "w.h5") as cs:
        cs.add_source(SourceSpec("w", chans, samplerate_hz=1e6)).append(pack_bits(bus_bits(10, 70)))
    assert cli("export", tmp_path / "w.h5", "-o", tmp_path / "w.sr") == 0
    assert "70 logic channels; PulseView draws at most 64" in capsys.readouterr().err
    assert "at most 64" in cli_fails(capsys, "export", tmp_path / "w.h5", "-o", tmp_path / "w2.sr", "--strict")
    assert not (tmp_path / "w2.sr").exists()
    assert cli("export", tmp_path / "w.h5", "-o", tmp_path / "w3.sr", "--strict", "--channels", "D1*") == 0


def test_state_export_edge_cases(tmp_path):
    with CaptureSet.create(tmp_path / "e.h5") as cs:
        cs.add_source(SourceSpec("tight", ["A", "B"], "state")).append(
            pack_bits(np.array([[0, 1], [1, 1], [1, 0], [0, 0]])), np.array([0, 1, 2, 10], dtype=np.int64))
        cs.add_source(SourceSpec("same", ["A"], "state", samplerate_hz=1e6)).append(
            pack_bits(np.array([[0], [1]])), np.array([5, 5], dtype=np.int64))
    with CaptureSet.open(tmp_path / "e.h5") as cs:
        write_vcd(tmp_path / "t.vcd", cs.source("tight"))  # edges 1 ps apart; no sample rate
        packed, ts = read_all(VcdReader(tmp_path / "t.vcd"))
        assert np.array_equal(packed, cs.source("tight").read_packed()) and ts.tolist() == [0, 1, 2, 10]
        with pytest.raises(UsageError, match="share a timestamp"):
            write_vcd(tmp_path / "s.vcd", cs.source("same"))
        assert not list(tmp_path.glob("*s.vcd*"))


# ---------------------------------------------------------------------------------------------
# real peers
# ---------------------------------------------------------------------------------------------
@needs_sigrok
def test_sigrok_cli_reads_our_exports(tmp_path):
    make_set(tmp_path / "a.h5", n=60)
    cli("export", tmp_path / "a.h5", "--source", "tim", "-o", tmp_path / "t.sr")
    cli("export", tmp_path / "a.h5", "--source", "st", "-o", tmp_path / "s.vcd")
    cli("export", tmp_path / "a.h5", "--source", "tim", "-o", tmp_path / "t.vcd", "--channels", "FRAME#,IRDY#,AD")
    r = subprocess.run([SIGROK, "-i", str(tmp_path / "t.sr"), "--show"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "Channels: 41" in r.stdout and "- AD[31]: logic" in r.stdout
    for f in ("s.vcd", "t.vcd"):
        r = subprocess.run([SIGROK, "-I", "vcd", "-i", str(tmp_path / f), "--show"], capture_output=True,
                           text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        assert "- FRAME#: logic" in r.stdout and "- IRDY#: logic" in r.stdout  # its VCD input drops vectors
    # with --split-vectors sigrok's VCD input reads every bit: the same samples, one per 1 / 66.67 MHz
    cli("export", tmp_path / "a.h5", "--source", "st", "-o", tmp_path / "sv.vcd", "--split-vectors")
    assert "AD[31]" in (tmp_path / "sv.vcd").read_text() and "AD[31:0]" not in (tmp_path / "sv.vcd").read_text()
    packed, _ = read_all(VcdReader(tmp_path / "sv.vcd"))  # still our exact round trip
    with CaptureSet.open(tmp_path / "a.h5") as cs:
        assert np.array_equal(packed, cs.source("st").read_packed())
    # sigrok's own CSV of our .sr reads back into nicrig: the same samples
    r = subprocess.run([SIGROK, "-i", str(tmp_path / "t.sr"), "-O", "csv:label=channel"], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0
    (tmp_path / "back.csv").write_text(r.stdout)
    reader = CsvReader(tmp_path / "back.csv")
    packed, _ = read_all(reader)
    with CaptureSet.open(tmp_path / "a.h5") as cs:
        assert reader.channels == CHANNELS and reader.samplerate_hz == 66.67e6
        assert np.array_equal(packed, cs.source("tim").read_packed())


@needs_sigrok
def test_sigrok_reads_the_values_of_a_split_vector_vcd(tmp_path):
    """sigrok's VCD input (1 ps timescale, downsampled to the 400 MHz grid) sees our samples."""
    chans = ["FRAME#", "IRDY#"] + [f"AD[{i}]" for i in range(4)] + ["PAR"]
    bits = bus_bits(120, len(chans), seed=9)
    with CaptureSet.create(tmp_path / "p.h5") as cs:
        cs.add_source(SourceSpec("p", chans, samplerate_hz=400e6)).append(pack_bits(bits))
    assert cli("export", tmp_path / "p.h5", "-o", tmp_path / "p.vcd", "--split-vectors") == 0
    r = subprocess.run([SIGROK, "-I", "vcd:downsample=2500", "-i", str(tmp_path / "p.vcd"), "-O",
                        "csv:label=channel"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0
    (tmp_path / "p.csv").write_text(r.stdout)
    reader = CsvReader(tmp_path / "p.csv")
    got = unpack_bits(read_all(reader)[0], len(chans))
    assert reader.channels == chans and reader.samplerate_hz == 400e6
    assert len(got) >= len(bits) - 1 and np.array_equal(got[: len(bits)], bits[: len(got)])


@pytest.mark.skipif(VCD2FST is None, reason="GTKWave's vcd2fst not installed")
def test_gtkwave_reads_our_vcd(tmp_path):
    make_set(tmp_path / "a.h5", n=60)
    cli("export", tmp_path / "a.h5", "--source", "st", "-o", tmp_path / "s.vcd")
    r = subprocess.run([VCD2FST, str(tmp_path / "s.vcd"), str(tmp_path / "s.fst")], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0 and (tmp_path / "s.fst").stat().st_size > 0


def test_command_modules_import_light():
    code = ("import sys; import nicrig.acquisition.importing, nicrig.acquisition.exporting; "
            "print(sorted(m for m in ('numpy', 'h5py', 'vcd', 'rich') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "[]", r.stdout + r.stderr


def test_csv_logic_block_streaming(tmp_path, monkeypatch):
    """Blocks are cut at the block size; a CSV with more rows than a block comes out whole."""
    monkeypatch.setattr(csv_logic, "BLOCK_SAMPLES", 7)
    p = tmp_path / "b.csv"
    bits = bus_bits(50, 3)
    p.write_text("A,B,C\n" + "".join(",".join(map(str, r)) + "\n" for r in bits))
    blocks = list(CsvReader(p, sample_rate_hz=1e6).blocks())
    assert max(len(b[0]) for b in blocks) == 7 and np.array_equal(np.concatenate([b[0] for b in blocks]),
                                                                  pack_bits(bits))


@pytest.mark.parametrize("umask", [0o022, 0o027])
def test_exports_get_the_permissions_any_new_file_gets(tmp_path, umask, capsys):
    """0666 less the umask, like the capture sets and any file a plain open() makes (mkstemp alone gives 0600)."""
    import stat

    make_set(tmp_path / "a.h5", n=200)
    old = os.umask(umask)
    try:
        assert cli("export", tmp_path / "a.h5", "--source", "tim", "-o", tmp_path / "t.sr") == 0
        assert cli("export", tmp_path / "a.h5", "--source", "st", "-o", tmp_path / "s.vcd") == 0
        assert cli("import", tmp_path / "s.vcd", "-o", tmp_path / "b.h5") == 0
    finally:
        os.umask(old)
    for name in ("t.sr", "s.vcd", "b.h5"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o666 & ~umask, name
    assert not list(tmp_path.glob(".*.partial"))


@pytest.mark.parametrize("source", ["tim", "st"])
def test_vcd_round_trip_keeps_the_source_name(tmp_path, source):
    """Without --source, nicrig's own VCD comes back under the exported source's name, not the file's."""
    make_set(tmp_path / "a.h5", n=300)
    assert cli("export", tmp_path / "a.h5", "--source", source, "-o", tmp_path / "renamed file.vcd") == 0
    assert cli("import", tmp_path / "renamed file.vcd", "-o", tmp_path / "b.h5") == 0
    assert cli("import", tmp_path / "renamed file.vcd", "-o", tmp_path / "b.h5", "--append", "--source", "again") == 0
    with CaptureSet.open(tmp_path / "a.h5") as a, CaptureSet.open(tmp_path / "b.h5") as b:
        assert b.source_names == sorted(["again", source])
        assert_same_source(a.source(source), b.source(source))  # rate, trigger, offset, roles, bus, times
    assert cli("import", tmp_path / "renamed file.vcd", "-o", tmp_path / "b.h5", "--append") == 2  # name taken


def test_printed_pcap_command_survives_a_path_with_spaces(tmp_path):
    """The line the export prints is pasted into a shell: every word must come back as it was."""
    from nicrig.acquisition.exporting import pcap_command

    sr, pcap = tmp_path / "probe run.sr", tmp_path / "probe run-rx.pcap"
    stack = "gmii:en=RX_DV:d0=RXD[0]:clock=state:direction=rx,ethernet:pcap_start=1795694527.999992384"
    line = pcap_command(sr, stack, pcap)
    words, target = line.rsplit(" > ", 1)
    assert shlex.split(words) == ["sigrok-cli", "-i", str(sr), "-P", stack, "-B", "ethernet=pcap"]
    assert shlex.split(target) == [str(pcap)]


def test_sample0_epoch_adds_the_timeline_to_the_creation_time():
    from nicrig.acquisition.exporting import sample0_epoch

    assert sample0_epoch("2026-11-26T12:00:00+00:00", 0) == "1795694400.000000000"
    assert sample0_epoch("2026-11-26T12:00:00+00:00", -7_616_001) == "1795694399.999992383"
    assert sample0_epoch("2026-11-26T12:00:00+00:00", 2_500_000_000_123) == "1795694402.500000000"
    assert sample0_epoch("", 0) is None and sample0_epoch("2026-11-26T12:00:00", 0) is None  # no zone: unknown


@needs_sigrok
@pytest.mark.skipif(shutil.which("tshark") is None, reason="tshark not installed")
def test_pcap_times_are_the_captures_own_time(tmp_path, capsys):
    """The export prints the sigrok-cli line; its pcap's frame times are the set's creation time plus the timeline."""
    from datetime import datetime

    from nicrig.acquisition.sim.rig import Recording
    from tests.conftest import simulate_set

    path = simulate_set(tmp_path, "lat", nic="sk9843", bus="pci32-33", recording=Recording(), kind="latency",
                        size_bytes=64, count=1)
    capsys.readouterr()
    assert cli("export", path, "--source", "probe", "-o", tmp_path / "probe.sr") == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if "pcap of the rx frames" in ln)
    command = line.split(": ", 1)[1]
    assert command.startswith("sigrok-cli -i ") and command.endswith("> " + str(tmp_path / "probe-rx.pcap"))
    args = shlex.split(command.rsplit(" > ", 1)[0])
    pcap = subprocess.run(args, capture_output=True, env={**os.environ, "SIGROKDECODE_DIR": str(DECODERS_DIR)},
                          check=True).stdout
    (tmp_path / "rx.pcap").write_bytes(pcap)
    out = subprocess.run(["tshark", "-r", str(tmp_path / "rx.pcap"), "-T", "fields", "-e", "frame.time_epoch"],
                         capture_output=True, text=True, check=True).stdout.split()
    with CaptureSet.open(path) as cs:
        created = datetime.fromisoformat(str(cs.attrs["created_utc"])).timestamp()
        rx = cs.read_table("truth/probe/frames")
        rx = rx[rx["direction"] == b"rx"]
        want = [created + int(t) / 1e12 for t in cs.source("probe").times_ps()[rx["ss"]]]
    assert len(out) == len(want) > 0
    assert all(abs(float(got) - w) < 2e-6 for got, w in zip(out, want)), (out, want)  # microsecond pcap
    assert datetime.fromtimestamp(float(out[0])).year == datetime.fromtimestamp(created).year  # not 1970


# ---------------------------------------------------------------------------------------------
# --json: what was written, one JSON document on stdout
# ---------------------------------------------------------------------------------------------
def json_out(capsys, *args: str | Path) -> dict:
    """Run ``nicrig ARGS --json``; its whole standard output parsed (nothing but the document is printed)."""
    capsys.readouterr()
    assert cli(*args, "--json") == 0
    return json.loads(capsys.readouterr().out)


def test_import_json_describes_the_source_it_wrote(tmp_path, capsys):
    make_set(tmp_path / "w.h5")
    assert cli("export", tmp_path / "w.h5", "--source", "st", "-o", tmp_path / "st.vcd") == 0
    assert cli("export", tmp_path / "w.h5", "--source", "tim", "-o", tmp_path / "tim.sr") == 0
    (tmp_path / "s.csv").write_text(SIGROK_CSV)
    out = tmp_path / "set.h5"
    for path, fmt, append in [(tmp_path / "st.vcd", "vcd", False), (tmp_path / "tim.sr", "sr", True),
                              (tmp_path / "s.csv", "csv", True)]:
        got = json_out(capsys, "import", path, "-o", out, *(["--append"] if append else []))
        assert {k: got[k] for k in ("file", "format", "output", "appended")} == \
            {"file": str(path), "format": fmt, "output": str(out), "appended": append}
        with CaptureSet.open(out) as cs:
            written = cs.source(got["source"]["name"]).describe()
        assert got["source"] == json.loads(json.dumps(written))
        assert got["source"]["instrument"]["format"] == fmt
    sources = json_out(capsys, "info", out)["sources"]
    assert sorted((s["name"], s["num_samples"]) for s in sources) == [("s", 4), ("st", 2000), ("tim", 2000)]


def test_export_json_lists_every_file_written(tmp_path, capsys):
    make_set(tmp_path / "w.h5")
    pci = ["FRAME#", "IRDY#", "TRDY#", "DEVSEL#", "STOP#"] + [f"AD[{i}]" for i in range(32)]
    with CaptureSet.amend(tmp_path / "w.h5") as cs:   # a state source with every role the PCI decoder needs
        w = cs.add_source(SourceSpec("pci", pci, "state", samplerate_hz=33e6, bus={"kind": "pci", "width_bits": 32},
                                     roles={"frame": "FRAME#", "irdy": "IRDY#", "trdy": "TRDY#", "devsel": "DEVSEL#",
                                            "stop": "STOP#", "ad": "AD"}))
        w.append(pack_bits(bus_bits(2000, len(pci))), 30_000 * np.arange(2000, dtype=np.int64))
    sr = tmp_path / "pci.sr"
    got = json_out(capsys, "export", tmp_path / "w.h5", "--source", "pci", "-o", sr, "--channels",
                   "FRAME#,IRDY#,TRDY#,DEVSEL#,AD", "--pulseview")
    assert (got["file"], got["source"]) == (str(tmp_path / "w.h5"), "pci")
    data, setup = got["written"]
    session = srzip.open_sr(sr)
    assert data == {"path": str(sr), "format": "sr", "samples": 2000, "channels": 36,
                    "samplerate_hz": session.samplerate_hz, "channel_names": session.channels}
    assert session.channels == ["FRAME#", "IRDY#", "TRDY#", "DEVSEL#"] + [f"AD[{i}]" for i in range(32)]
    assert setup["path"] == str(sr.with_suffix(".pvs")) and setup["format"] == "pvs" and setup["data"] == str(sr)
    assert sr.with_suffix(".pvs").is_file() and [d["name"] for d in setup["decoders"]] == ["PCI"]
    assert any("nominal clock rate" in n for n in got["notes"])      # a state source in a .sr
    assert got["pcap_commands"] == []                                # no Ethernet stack on a PCI source

    vcd_path = tmp_path / "tim.vcd"
    got = json_out(capsys, "export", tmp_path / "w.h5", "--source", "tim", "-o", vcd_path)
    (written,) = got["written"]
    assert written["path"] == str(vcd_path) and written["format"] == "vcd"
    assert (written["samples"], written["channels"], written["channel_names"]) == (2000, len(CHANNELS), CHANNELS)
    assert written["vectors"] == {"AD": 32, "C/BE#": 4} and written["clock"] is None
    back = json_out(capsys, "import", vcd_path, "-o", tmp_path / "back.h5")
    assert back["source"]["num_samples"] == written["samples"]

    # without --json: the same facts as text
    assert cli("export", tmp_path / "w.h5", "--source", "tim", "-o", vcd_path) == 0
    text = capsys.readouterr().out
    assert text.startswith(f"wrote {vcd_path}: source 'tim', 2,000 samples, {len(CHANNELS)} channels")
    assert "{" not in text
