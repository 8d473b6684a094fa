"""Hostile and absurd input files: every importer checks what a file declares before it allocates.

Each file is built here, small, the way an attacker (or a broken tool) would write
it; ``nicrig import`` must refuse it with one line naming the file and the value,
exit 2, and no traceback. Costs are checked by sizes and operation counts, never by
the clock.
"""

from __future__ import annotations

import cProfile
import json
import pstats
import tracemalloc
import zipfile
from pathlib import Path

import numpy as np
import pytest
from hostile import nested_vcd, one_long_line
from nicrig.acquisition import limits
from nicrig.acquisition.capture import CaptureSet
from nicrig.acquisition.srzip import open_sr
from nicrig.acquisition.vcd import META_TAG, VcdReader

from nicrig.cli import main


def refused(capsys, path: Path, *extra: str) -> str:
    """Import ``path``; assert exit 2, one error line naming the file, no traceback; the line."""
    out = path.with_suffix(".h5")
    rc = main(["import", str(path), "-o", str(out), *extra])
    err = capsys.readouterr().err
    assert rc == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("nicrig: error: ") and "Traceback" not in err
    assert str(path) in lines[0] or not extra and path.name in lines[0]
    assert not out.exists()
    return lines[0]


def sr_file(path: Path, metadata: str, data: bytes = b"\x00" * 16, *,
            compression: int = zipfile.ZIP_DEFLATED) -> Path:
    with zipfile.ZipFile(path, "w", compression=compression) as zf:
        zf.writestr("version", "2")
        zf.writestr("metadata", metadata)
        zf.writestr("logic-1-1", data)
    return path


def meta(probes: int = 2, unitsize: int = 1, rate: str = "1 MHz") -> str:
    names = "".join(f"probe{i + 1}=D{i}\n" for i in range(min(probes, 4)))
    return (f"[global]\nsigrok version=0.5.1\n[device 1]\ncapturefile=logic-1\ntotal probes={probes}\n"
            f"samplerate={rate}\n{names}unitsize={unitsize}\n")


# -- sigrok session files ---------------------------------------------------------------------------
def test_a_tiny_session_file_declaring_a_billion_probes(tmp_path, capsys):
    p = sr_file(tmp_path / "probes.sr", meta(probes=10**9))
    assert p.stat().st_size < 600
    assert "1,000,000,000 probes" in refused(capsys, p)


@pytest.mark.parametrize("rate, shown", [("inf Hz", "inf Hz"), ("1e30 Hz", "1e+30 Hz"), ("-5 Hz", "-5 Hz"),
                                         ("1e-9 Hz", "1e-09 Hz")])
def test_absurd_session_sample_rates(tmp_path, capsys, rate, shown):
    line = refused(capsys, sr_file(tmp_path / "rate.sr", meta(rate=rate)))
    assert f"samplerate {shown}" in line


@pytest.mark.parametrize("unitsize, message", [(10**6, "bad unitsize 1000000"), (0, "bad unitsize 0")])
def test_absurd_unit_sizes(tmp_path, capsys, unitsize, message):
    assert message in refused(capsys, sr_file(tmp_path / "unit.sr", meta(unitsize=unitsize)))


def patch_member(path: Path, member: str, flag: int | None = None, method: int | None = None) -> None:
    """Rewrite ``member``'s zip headers in place: its general-purpose flags and/or its compression method."""
    raw = bytearray(path.read_bytes())
    name = member.encode()
    for sig, flag_at, method_at, name_at in ((b"PK\x03\x04", 6, 8, 30), (b"PK\x01\x02", 8, 10, 46)):
        at = raw.find(sig)
        while at >= 0:
            if raw[at + name_at: at + name_at + len(name)] == name:
                if flag is not None:
                    raw[at + flag_at: at + flag_at + 2] = flag.to_bytes(2, "little")
                if method is not None:
                    raw[at + method_at: at + method_at + 2] = method.to_bytes(2, "little")
            at = raw.find(sig, at + 1)
    path.write_bytes(bytes(raw))


def test_encrypted_and_unknown_compression_members(tmp_path, capsys):
    enc = sr_file(tmp_path / "enc.sr", meta())
    patch_member(enc, "logic-1-1", flag=0x1)
    assert "'logic-1-1' is encrypted" in refused(capsys, enc)
    odd = sr_file(tmp_path / "odd.sr", meta())
    patch_member(odd, "logic-1-1", method=99)
    assert "compression method 99" in refused(capsys, odd)
    meta_odd = sr_file(tmp_path / "meta.sr", meta())
    patch_member(meta_odd, "metadata", method=12)  # bzip2 on the header of a deflated member: damaged
    assert "meta.sr" in refused(capsys, meta_odd)


def test_a_session_file_is_streamed_in_bounded_memory(tmp_path, capsys):
    n = 48 << 20  # 48 Mi one-byte samples of zeros: about 50 KB compressed
    p = tmp_path / "zeros.sr"
    with zipfile.ZipFile(p, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1) as zf:
        zf.writestr("version", "2")
        zf.writestr("metadata", meta())
        with zf.open("logic-1-1", "w") as f:
            for _ in range(n >> 22):
                f.write(bytes(4 << 20))
    assert p.stat().st_size < n // 100
    stream = open_sr(p)
    assert stream.num_samples == n
    tracemalloc.start()
    total = sum(len(b) for b in stream.blocks())
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert total == n and peak < n // 8  # a few 1 Mi-sample blocks, never the whole expansion
    rc = main(["import", str(p), "-o", str(tmp_path / "zeros.h5")])
    capsys.readouterr()
    assert rc == 0
    with CaptureSet.open(tmp_path / "zeros.h5") as cs:
        assert cs.source("zeros").num_samples == n


def test_a_session_file_declaring_more_samples_than_the_limit(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(limits, "MAX_SAMPLES", 1000)
    p = sr_file(tmp_path / "many.sr", meta(), bytes(1001))
    assert "1,001 samples" in refused(capsys, p)


def test_a_member_that_holds_less_than_it_declares(tmp_path, capsys):
    p = sr_file(tmp_path / "short.sr", meta(), bytes(64), compression=zipfile.ZIP_STORED)
    raw = bytearray(p.read_bytes())
    at = raw.find(b"PK\x01\x02")
    while raw[at + 46: at + 55] != b"logic-1-1":
        at = raw.find(b"PK\x01\x02", at + 1)
    raw[at + 24: at + 28] = (1 << 30).to_bytes(4, "little")  # the central directory claims 1 GiB
    p.write_bytes(bytes(raw))
    assert "short.sr" in refused(capsys, p)


# -- VCD --------------------------------------------------------------------------------------------
def vcd(path: Path, decls: str, body: str, timescale: str = "1 ns") -> Path:
    path.write_text(f"$timescale {timescale} $end\n$scope module top $end\n{decls}$upscope $end\n"
                    f"$enddefinitions $end\n{body}")
    return path


def test_a_200_byte_vcd_declaring_a_million_bit_vector(tmp_path, capsys):
    p = vcd(tmp_path / "wide.vcd", "$var wire 1000000 ! v [999999:0] $end\n", "#0\nb1 !\n#10\n")
    assert p.stat().st_size < 200
    assert "v is declared 1,000,000 bits wide" in refused(capsys, p)


@pytest.mark.parametrize("time", ["1" + "0" * 40, "9" * 5000, "9300000000000000"])
def test_vcd_times_beyond_the_timeline(tmp_path, capsys, time):
    p = vcd(tmp_path / "late.vcd", "$var wire 1 ! a $end\n", f"#0\n0!\n#{time}\n1!\n")
    line = refused(capsys, p)
    assert "late.vcd:8: time #" in line and "beyond" in line


@pytest.mark.parametrize("rate", ["inf", "1e30", "nan"])
def test_absurd_sample_rates_given_on_the_command_line(tmp_path, capsys, rate):
    p = vcd(tmp_path / "ok.vcd", "$var wire 1 ! a $end\n", "#0\n0!\n#10\n1!\n")
    rc = main(["import", str(p), "-o", str(tmp_path / "ok.h5"), "--sample-rate", rate])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "sample rate" in err and "Traceback" not in err


def test_more_logic_bits_than_a_source_holds_and_scope_picks_fewer(tmp_path, capsys):
    n = limits.MAX_CHANNELS + 1
    decls = "".join(f"$var wire 1 v{i} s{i} $end\n" for i in range(n - 2))
    decls += "$scope module pci $end\n$var wire 1 f FRAME# $end\n$var wire 1 i IRDY# $end\n$upscope $end\n"
    p = vcd(tmp_path / "many.vcd", decls, "#0\n0f\n1i\n#10\n1f\n0i\n#20\n")
    assert f"{n:,} logic bits to import (use --scope for fewer)" in refused(capsys, p)
    assert main(["import", str(p), "-o", str(tmp_path / "pci.h5"), "--scope", "pci"]) == 0
    capsys.readouterr()
    with CaptureSet.open(tmp_path / "pci.h5") as cs:
        assert cs.source("many").channels == ["FRAME#", "IRDY#"]


@pytest.mark.parametrize("bad", [
    {"version": "one", "mode": "timing"},
    {"version": 1, "mode": "timing", "samplerate_hz": "fast"},
    {"version": 1, "mode": "timing", "samplerate_hz": 1e30},
    {"version": 1, "mode": "state", "clock": 5},
    {"version": 1, "mode": "timing", "channels": 5},
    {"version": 1, "mode": "timing", "trigger_sample": -1},
    {"version": 1, "mode": "timing", "names": ["a"]},
    {"version": 1, "mode": "timing", "offset_ps": 10**40},
    [1, 2, 3],
])
def test_a_malformed_nicrig_export_comment_is_ignored_with_a_note(tmp_path, capsys, bad):
    comment = f"$comment {META_TAG} {json.dumps(bad)} $end\n"
    p = tmp_path / "meta.vcd"
    p.write_text(comment + "$timescale 1 ns $end\n$scope module top $end\n$var wire 1 ! a $end\n$upscope $end\n"
                 "$enddefinitions $end\n#0\n0!\n#10\n1!\n")
    rc = main(["import", str(p), "-o", str(tmp_path / "meta.h5")])
    out, err = capsys.readouterr()
    assert rc == 0 and "Traceback" not in err
    assert f"ignored an unreadable {META_TAG} comment" in out
    with CaptureSet.open(tmp_path / "meta.h5") as cs:
        assert cs.source("meta").samplerate_hz == 1e8  # derived from the changes, nothing taken from the comment


def calls(path: Path) -> int:
    """Python function calls made reading ``path`` whole (a count of operations, not a time)."""
    prof = cProfile.Profile()
    prof.enable()
    reader = VcdReader(path)
    for _ in reader.blocks():
        pass
    prof.disable()
    return pstats.Stats(prof).total_calls


def test_vcd_import_is_linear_in_the_number_of_variables(tmp_path):
    def many(n: int) -> Path:
        decls = "".join(f"$var wire 1 v{i} s{i} $end\n" for i in range(n))
        body = "#0\n$dumpvars\n" + "".join(f"0v{i}\n" for i in range(n)) + "$end\n#10\n" + \
            "".join(f"1v{i}\n" for i in range(0, n, 3)) + "#20\n"
        return vcd(tmp_path / f"v{n}.vcd", decls, body)

    calls(many(50))  # imports and caches warmed up
    small, large = calls(many(1000)), calls(many(3000))
    assert large < 3.6 * small, (small, large)  # quadratic (the old skipped-variable list) made this ~9x


def test_vcd_scopes_nested_deeper_than_the_limit(tmp_path, capsys):
    ok = nested_vcd(tmp_path / "deep.vcd", limits.MAX_VCD_SCOPE_DEPTH)
    assert main(["import", str(ok), "-o", str(tmp_path / "deep.h5")]) == 0
    capsys.readouterr()
    line = refused(capsys, nested_vcd(tmp_path / "deeper.vcd", limits.MAX_VCD_SCOPE_DEPTH + 1))
    assert f"deeper.vcd:{limits.MAX_VCD_SCOPE_DEPTH + 2}: $scope nested deeper than " \
           f"{limits.MAX_VCD_SCOPE_DEPTH} levels" in line


def test_a_scope_named_at_every_level_gives_a_short_answer(tmp_path, capsys):
    """``--scope m.m`` in ``m.m.m...``: every level from the second matches; the message names a few."""
    p = nested_vcd(tmp_path / "mmm.vcd", limits.MAX_VCD_SCOPE_DEPTH)
    line = refused(capsys, p, "--scope", "m.m")
    assert "ambiguous: m.m, m.m.m," in line and f"and {limits.MAX_VCD_SCOPE_DEPTH - 6} more" in line
    assert len(line) < 300
    assert "no scope 'x.m'" in refused(capsys, p, "--scope", "x.m")


def header_peak(path: Path) -> int:
    """Peak Python memory (bytes) of reading the header of ``path``."""
    from nicrig.acquisition.vcd import read_header

    tracemalloc.start()
    read_header(path)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak


def test_vcd_scopes_cost_memory_linear_in_the_header(tmp_path):
    """A scope is a link to its parent, never a copy of its path: 250-deep scopes cost what shallow ones do
    per byte of header (a copy of the path per ``$scope`` made it ~29 bytes a byte, growing with depth)."""
    small = nested_vcd(tmp_path / "small.vcd", 250, repeats=10, name="")
    large = nested_vcd(tmp_path / "large.vcd", 250, repeats=30, name="")
    per_byte = [header_peak(p) / p.stat().st_size for p in (small, large)]
    assert max(per_byte) < 12 and per_byte[1] < 1.2 * per_byte[0], per_byte


# -- CSV --------------------------------------------------------------------------------------------
def test_csv_with_more_columns_than_a_source_holds(tmp_path, capsys):
    n = limits.MAX_CHANNELS + 1
    p = tmp_path / "wide.csv"
    p.write_text("; Samplerate: 1 MHz\n" + ",".join(f"c{i}" for i in range(n)) + "\n" + ",".join("0" * n) + "\n")
    assert f"{n:,} columns" in refused(capsys, p)


@pytest.mark.parametrize("text, message", [
    ("; Samplerate: 1e30 Hz\nA,B\n0,1\n", "bad sample rate"),
    ("META samplerate: " + "9" * 400 + "\nA,B\n0,1\n", "samplerate inf Hz"),
    ("Time [s],A\n0,1\n1e40,0\n", "time 1e40 is beyond"),
    ("Time [s],A\n0,1\n1e999999999,0\n", "time 1e999999999 is beyond"),
    ("Time [s],A\n0,1\n1000000,0\n", "sample rate of 1e-06 Hz"),
])
def test_csv_rates_and_times_out_of_range(tmp_path, capsys, text, message):
    p = tmp_path / "bad.csv"
    p.write_text(text)
    assert message in refused(capsys, p)


@pytest.mark.parametrize("name, head, line", [
    ("long.csv", "; Samplerate: 1 MHz\nA,B\n0,1\n", 4),
    ("first.csv", "", 1),
    ("long.vcd", "$timescale 1 ns $end\n$scope module top $end\n$var wire 1 ! a $end\n$upscope $end\n"
                 "$enddefinitions $end\n#0\n0!\n", 8),
])
def test_a_file_of_one_endless_line_is_read_a_bounded_line_at_a_time(tmp_path, capsys, name, head, line):
    """A single line of 8 MB (one of 200 MB was once held whole, 473 MB, before its error): refused at the line
    limit, with memory for one line of the limit, never the whole line."""
    p = one_long_line(tmp_path / name, head, 8 << 20)
    tracemalloc.start()
    message = refused(capsys, p)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert f"{name}:{line}: a line longer than {limits.MAX_LINE_BYTES:,} characters" in message
    assert peak < 4 * limits.MAX_LINE_BYTES, peak


def test_limits_are_what_the_docs_say():
    doc = (Path(__file__).parent.parent / "docs" / "import-export.md").read_text()
    for value in (f"{limits.MAX_CHANNELS:,}", f"{limits.MAX_SAMPLES:,}", f"{limits.MAX_VCD_VARIABLES:,}",
                  f"{limits.MAX_VCD_SCOPE_DEPTH} levels", f"{limits.MAX_LINE_BYTES:,} characters",
                  "1 THz", "1 mHz"):
        assert value in doc
    assert np.iinfo(np.int64).max == limits.MAX_TIME_PS
