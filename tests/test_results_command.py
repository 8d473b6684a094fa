"""A udpmon results file (or a simulated capture set's results) records the command that ran, also when another
program runs it in-process.

``command`` (docs/formats.md, "udpmon results") is ``nicrig`` and the words after it as given:
called through :func:`nicrig.cli.main` from a test or a script, and run by ``nicrig acquire`` for
its ``[udpmon]`` test, ``sys.argv`` is the calling program's (here pytest's), not the run's.
"""

from __future__ import annotations

import json
import sys
from contextlib import redirect_stdout
from io import StringIO
from pathlib import Path

from conftest import udpmon_daemon_on_loopback
from nicrig.acquisition.acquire import Traffic
from nicrig.cli import main
from nicrig.udpmon.results import ResultsFile


def recorded_command(path: Path) -> list[str]:
    with ResultsFile.open(path) as rf:
        return json.loads(rf.attrs["command"])


def test_a_run_called_in_process_records_its_own_command(tmp_path):
    out = tmp_path / "lat.h5"
    with udpmon_daemon_on_loopback() as port:
        argv = ["udpmon", "latency", "127.0.0.1", "--port", str(port), "--sizes", "64,200", "--count", "4",
                "-o", str(out), "--json"]
        with redirect_stdout(StringIO()):
            assert main(argv) == 0
    assert recorded_command(out) == ["nicrig", *argv]
    assert sys.argv[1:] != argv            # what the old code recorded: pytest's command line


def test_acquire_s_udpmon_test_records_the_udpmon_command_not_acquire_s(tmp_path):
    """``nicrig acquire`` runs its ``[udpmon]`` test in its own process (acquisition/acquire.py, Traffic)."""
    results = tmp_path / "rig-udpmon.h5"
    with udpmon_daemon_on_loopback() as port:
        test = ["stream", "127.0.0.1", "--port", str(port), "--sizes", "256", "--spacing-us", "50", "--count", "50"]
        outcome = Traffic(test, results)()
    assert outcome["exit"] == 0 and Path(outcome["results"]) == results
    assert recorded_command(results) == ["nicrig", "udpmon", *test, "-o", str(results), "--json"]


def test_a_simulation_called_in_process_records_its_own_command(tmp_path):
    """The results group of a simulated capture set records ``nicrig simulate ...`` as given."""
    from nicrig.acquisition.capture import CaptureSet
    from nicrig.udpmon.results import RESULTS_GROUP

    out = tmp_path / "sim.h5"
    argv = ["simulate", "--scenario", "latency", "--count", "2", "-o", str(out), "--json"]
    with redirect_stdout(StringIO()):
        assert main(argv) == 0
    with CaptureSet.open(out) as cs, cs.nested(ResultsFile, RESULTS_GROUP) as rf:
        assert json.loads(rf.attrs["command"]) == ["nicrig", *argv]
    assert sys.argv[1:] != argv
