"""Start-up cost: the simulator and the common subcommands' ``--help`` do not import SciPy or Scapy.

Importing SciPy's ``stats``/``signal`` and Scapy's ``inet`` layer (which reads the host's routing
table) cost about 2 s of CPU; they are imported by the functions that fit lines or build frames.
Each case runs in a fresh interpreter, since this test process has long imported both.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("scipy", "scapy")

_PROBE = r"""
import json, sys
{body}
print(json.dumps(sorted({{name.partition(".")[0] for name in sys.modules}} & set({heavy!r}))))
"""

_CLI = r"""
from nicrig import cli
try:
    status = cli.main({argv!r})
except SystemExit as exc:
    status = exc.code
if status:
    raise SystemExit(f"nicrig {argv!r} exited {{status}}")
"""


def heavy_imported(body: str) -> list[str]:
    """The packages of HEAVY that ``body``, run in a fresh interpreter, leaves in ``sys.modules``."""
    r = subprocess.run([sys.executable, "-c", _PROBE.format(body=body, heavy=HEAVY)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.splitlines()[-1])


@pytest.mark.parametrize("module", ["nicrig.acquisition.sim.rig", "nicrig.udpmon.results",
                                    "nicrig.acquisition.sim.ethernet"])
def test_importing_the_simulator_imports_neither_scipy_nor_scapy(module):
    assert heavy_imported(f"import {module}") == []


@pytest.mark.parametrize("argv", [["--help"], ["simulate", "--help"], ["udpmon", "--help"],
                                  ["udpmon", "latency", "--help"], ["decode", "--help"],
                                  ["events", "--help"], ["info", "--help"]])
def test_common_subcommands_help_imports_neither_scipy_nor_scapy(argv):
    assert heavy_imported(_CLI.format(argv=argv)) == []


def test_the_probe_sees_them_once_used():
    """Building a frame imports Scapy and the latency estimator imports SciPy: the probe above
    would see them if the simulator's import pulled them in."""
    body = """
from nicrig.acquisition.sim.ethernet import pause_frame
from nicrig.analysis.latency import estimate
pause_frame("02:00:00:00:00:01", 1)
"""
    assert heavy_imported(body) == ["scapy", "scipy"]


def test_a_simulated_stream_writes_its_results_without_scipy_stats(tmp_path):
    """The stream's rate interval needs Student's t quantile only: ``scipy.special`` (a fraction of
    ``scipy.stats``'s second of import) serves it, so a whole ``nicrig simulate`` never loads ``scipy.stats``.
    With one worker (this process) measuring the results too, not a forked one."""
    out = tmp_path / "s.h5"
    argv = ["simulate", "--scenario", "stream", "--size", "1400", "--spacing-us", "11", "--count", "60",
            "--rounds", "1", "--capture-count", "0", "--workers", "1", "-o", str(out)]
    body = _CLI.format(argv=argv) + """
import h5py, math
with h5py.File({out!r}) as f:
    assert math.isfinite(f["results/stream/points"]["user_rate_ci95_mbps"][0]), "the interval was not computed"
assert "scipy.stats" not in sys.modules and "scipy.special" in sys.modules
""".format(out=str(out))
    heavy_imported(body)


_AT_EXIT = r"""
import atexit, gc, sys
atexit.register(lambda: print("frozen at exit:", gc.get_freeze_count()))
sys.argv = ["nicrig", *{argv!r}]
from nicrig.cli import program
program()
"""


@pytest.mark.parametrize(("argv", "status"), [(["decoders", "list"], 0), (["info", "/nonexistent.h5"], 2)])
def test_the_program_exits_with_mains_status_leaving_its_objects_to_the_system(argv, status):
    """Run as a program, a command ends with its objects frozen, so that the interpreter's last collection does
    not free them one by one (2.3 s after an 18,000-frame simulate), and with main's exit status."""
    r = subprocess.run([sys.executable, "-c", _AT_EXIT.format(argv=argv)], capture_output=True, text=True, timeout=300)
    assert r.returncode == status, r.stderr
    frozen = int(r.stdout.rpartition("frozen at exit:")[2])
    assert frozen > 1000
