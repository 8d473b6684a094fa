"""Shared test helpers."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from nicrig.acquisition.sim import profiles
from nicrig.acquisition.sim.model import Scenario
from nicrig.acquisition.sim.rig import Recording, simulate


def run_unprivileged(argv: Sequence[str], **kwargs) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` as an ordinary user: as root, as ``nobody`` with every capability dropped.

    Permission checks mean nothing to root, so tests of "not writable" run through this.
    """
    prefix: list[str] = []
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.skip(reason="running as root without setpriv: cannot test as an ordinary user")
        prefix = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                  "--inh-caps=-all", "--bounding-set=-all"]
    return subprocess.run([*prefix, *argv], capture_output=True, text=True, **kwargs)


@pytest.fixture
def read_only_folder() -> Iterator[Path]:
    """A folder nobody may write to, inside a folder everybody may enter (pytest's tmp_path is private)."""
    top = Path(tempfile.mkdtemp(prefix="nicrig-ro-"))
    top.chmod(0o755)
    ro = top / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        yield ro
    finally:
        ro.chmod(0o755)
        shutil.rmtree(top)


def simulate_set(folder: Path, name: str, *, nic: str = "intel-pro1000", bus: str = "pci64-66",
                 host: str = "supermicro-370dle", recording: Recording = Recording(), **scenario) -> Path:
    """Simulate ``Scenario(**scenario)`` on the named (or TOML-file) profiles into ``folder/name.h5``."""
    out = folder / f"{name}.h5"
    simulate(Scenario(**scenario), profiles.load("bus", bus), profiles.load("nic", nic),
             profiles.load("host", host), out, recording)
    return out
