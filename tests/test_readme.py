"""The README's command-line examples, run in order: each produces what the next one reads.

The commands are read from the README itself, so the test follows the README. Those that
need what a test cannot give here are left out, each for a stated reason; the others run
in a fresh folder and must succeed and print what a user expects to see.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"

#: Commands not run here, and why.
NOT_RUN = {
    "decoders": "installs into the user's PulseView folder (tests/test_pulseview.py installs into a temporary one)",
    "instrument": "a server that runs until stopped (tests/test_acquire_cli.py starts one)",
    "acquire": "needs the instrument server above (tests/test_acquire_cli.py)",
    "gui": "opens a window (tests/test_gui.py)",
    "udpmon": "needs two hosts (tests/test_udpmon_commands.py runs them on loopback)",
    "trace": "exports the traced two-host run above (tests/test_hostprobe_*.py record and export as root)",
}


def readme_commands() -> list[list[str]]:
    """Every ``.venv/bin/nicrig ...`` line of the README's example block: continuations joined, comments cut."""
    blocks = re.findall(r"```sh\n(.*?)```", README.read_text(), re.S)
    text = next(b for b in blocks if ".venv/bin/nicrig --help" in b)
    commands = []
    for line in text.replace("\\\n", " ").splitlines():
        words = shlex.split(re.sub(r"(^|\s)#.*$", "", line))  # as bash: '#' starts a comment at a word's start
        if words[:1] == [".venv/bin/nicrig"]:
            commands.append(words[1:])
    return commands


@pytest.mark.slow
def test_the_readme_examples_run_in_order_and_each_finds_its_input(tmp_path):
    commands = readme_commands()
    assert [c[0] for c in commands[:4]] == ["--help", "simulate", "simulate", "simulate"]
    outputs = {}
    for argv in commands:
        if argv[0] in NOT_RUN or any("*" in a for a in argv):
            continue
        r = subprocess.run([sys.executable, "-m", "nicrig", *argv], cwd=tmp_path, capture_output=True, text=True,
                           timeout=600)
        assert r.returncode == 0, \
            f"nicrig {' '.join(argv)}: exit {r.returncode}\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}"
        outputs[" ".join(argv)] = r.stdout
    events = next(out for cmd, out in outputs.items() if cmd.startswith("events stream.h5")).splitlines()
    assert len(events) > 1 and "0x8808" in events[1], events  # the stream example makes PAUSE frames
    assert any("wrote send.pvs" in out for cmd, out in outputs.items() if cmd.startswith("export"))
    assert (tmp_path / "back.h5").is_file() and (tmp_path / "report.html").stat().st_size > 0


@pytest.mark.parametrize("name", sorted(NOT_RUN))
def test_every_command_left_out_is_in_the_readme(name):
    assert any(c[0] == name for c in readme_commands()), f"NOT_RUN names {name!r}, which the README no longer shows"
