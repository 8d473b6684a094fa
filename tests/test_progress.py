"""Progress of long commands when standard error is not a terminal: a line every few seconds (here, with
``NICRIG_PROGRESS_S=0``, one a step), from the one helper every long command uses; none on a terminal."""

from __future__ import annotations

import io
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import wait_accepting
from nicrig import progress as P

LINE = re.compile(r"^nicrig (?P<label>[^:]+(?:: [^:]+)?): (?P<done>[\d,]+) of (?P<total>[\d,]+) (?P<unit>.+) "
                  r"\((?P<share>\d+)%\), \d+ s$")


def nicrig(*args: str, interval: str = "0") -> subprocess.CompletedProcess[str]:
    """``nicrig ...`` with standard error a pipe (not a terminal), as in a batch job or a CI log."""
    env = dict(os.environ, NICRIG_PROGRESS_S=interval)
    r = subprocess.run([sys.executable, "-m", "nicrig", *args], capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr
    return r


def progress_lines(stderr: str, label: str) -> list[re.Match[str]]:
    return [m for m in map(LINE.match, stderr.splitlines()) if m and m["label"] == label]


def test_a_line_per_step_names_the_task_count_unit_and_share(monkeypatch):
    out = io.StringIO()
    clock = iter([100.0, 101.0, 103.4, 107.0]).__next__
    monkeypatch.setenv("NICRIG_PROGRESS_S", "0")
    with P.Progress(out, tty=False, clock=clock) as p:
        update = p.task("udpmon stream", 12, "streams")
        update(3)
        update(12)
        p.task("report: rendering HTML")(0)
    assert out.getvalue().splitlines() == ["nicrig udpmon stream: 3 of 12 streams (25%), 1 s",
                                           "nicrig udpmon stream: 12 of 12 streams (100%), 3 s",
                                           "nicrig report: rendering HTML, 7 s"]


def test_a_total_learnt_late_and_no_total():
    assert P.progress_line("decode", 5_000_000, None, "samples", 2.2) == "nicrig decode: 5,000,000 samples, 2 s"
    assert P.progress_line("decode", 1, 4, "samples", 0) == "nicrig decode: 1 of 4 samples (25%), 0 s"


@pytest.mark.parametrize("text, seconds", [("", 5.0), ("2.5", 2.5), ("0", 0.0), ("-1", 5.0), ("soon", 5.0)])
def test_interval_from_the_environment(monkeypatch, text, seconds):
    monkeypatch.setenv("NICRIG_PROGRESS_S", text)
    assert P.interval_s() == seconds


def test_lines_keep_coming_while_one_step_lasts(monkeypatch):
    """Within a single long step (one stream of many packets) the line still comes every interval."""
    monkeypatch.setenv("NICRIG_PROGRESS_S", "0.01")
    out = io.StringIO()
    with P.Progress(out, tty=False) as p:
        p.task("udpmon stream", 4, "streams")(1)
        deadline = time.monotonic() + 60
        while out.getvalue().count("\n") < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
    lines = out.getvalue().splitlines()
    assert len(lines) >= 3 and all(line.startswith("nicrig udpmon stream: 1 of 4 streams (25%), ") for line in lines)


def test_short_runs_and_terminals_get_no_lines(monkeypatch):
    monkeypatch.setenv("NICRIG_PROGRESS_S", "3600")
    out = io.StringIO()
    with P.Progress(out, tty=False) as p:
        p.task("decode", 10, "samples")(10)
    assert out.getvalue() == ""
    monkeypatch.setenv("NICRIG_PROGRESS_S", "0")
    with P.Progress(out, tty=True) as p:   # a rich bar instead (transient: nothing left behind)
        p.task("decode", 10, "samples")(10)
    assert "nicrig decode:" not in out.getvalue()


# -- every long command, through the real CLI ---------------------------------------------------------------
@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("progress")
    return {"cap": folder / "cap.h5", "vcd": folder / "cap.vcd", "imported": folder / "imported.h5",
            "lat": folder / "lat.h5"}


def test_simulate_decode_export_import_and_report_show_progress_off_a_terminal(files):
    r = nicrig("simulate", "--scenario", "latency", "--size", "1400", "--count", "2", "-o", str(files["cap"]))
    lines = progress_lines(r.stderr, "simulate: writing send_pci")
    assert lines and lines[-1]["unit"] == "clocks" and lines[-1]["share"] == "100"
    r = nicrig("decode", str(files["cap"]))
    lines = progress_lines(r.stderr, "decode")
    assert lines and lines[-1]["unit"] == "samples" and lines[-1]["done"] == lines[-1]["total"]
    r = nicrig("export", str(files["cap"]), "--source", "send_pci", "-o", str(files["vcd"]))
    lines = progress_lines(r.stderr, f"export: writing {files['vcd'].name}")
    assert lines and lines[-1]["unit"] == "samples" and lines[-1]["share"] == "100"
    r = nicrig("import", str(files["vcd"]), "-o", str(files["imported"]))
    lines = progress_lines(r.stderr, f"import: reading {files['vcd'].name}")
    assert lines and lines[-1]["unit"] == "bytes" and lines[-1]["share"] == "100"
    r = nicrig("report", str(files["cap"]), "--json")
    assert [m["done"] for m in progress_lines(r.stderr, "report: analysing")] == ["0", "1"]
    assert "nicrig report: rendering JSON, " in r.stderr
    assert r.stdout.startswith("{")   # the data on standard output, untouched


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_udpmon_stream_and_latency_show_progress_off_a_terminal():
    """The case of the issue: ``udpmon stream`` said nothing on a pipe until it ended."""
    port = _free_port()
    daemon = subprocess.Popen([sys.executable, "-m", "nicrig", "udpmon", "serve", "--bind", "127.0.0.1", "--port",
                               str(port)], stderr=subprocess.DEVNULL)
    try:
        wait_accepting("127.0.0.1", port, daemon)
        r = nicrig("udpmon", "stream", "127.0.0.1", "--port", str(port), "--sizes", "64,512", "--spacing-us", "20",
                   "--count", "200", "--rounds", "2", "--json")
        lines = progress_lines(r.stderr, "udpmon stream")
        assert [(m["done"], m["total"], m["unit"]) for m in lines] == [(str(k), "4", "streams") for k in range(1, 5)]
        r = nicrig("udpmon", "latency", "127.0.0.1", "--port", str(port), "--sizes", "64,1000", "--count", "20",
                   "--rounds", "2", "--json")
        lines = progress_lines(r.stderr, "udpmon latency")
        assert [m["done"] for m in lines] == ["1", "2", "3", "4"] and lines[0]["unit"] == "visits (a size in a round)"
    finally:
        daemon.terminate()
        daemon.wait(10)
