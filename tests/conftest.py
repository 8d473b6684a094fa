"""Shared test helpers."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest


def run_unprivileged(argv: Sequence[str], **kwargs) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` as an ordinary user: as root, as ``nobody`` with every capability dropped.

    Permission checks mean nothing to root, so tests of "not writable" run through this.
    """
    prefix: list[str] = []
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.skip("running as root without setpriv: cannot test as an ordinary user")
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
