"""The suite runs with a home, config, data and cache folder of its own (tests/conftest.py), so what a user
installed or configured (decoders in ~/.local/share/libsigrokdecode/decoders, PulseView settings, nicrig's
overview cache) never changes a result, and no test writes into the user's home."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
from pathlib import Path

from conftest import TEST_HOME
from nicrig.decoders import catalog


def test_home_and_xdg_folders_are_the_sessions_own():
    user_home = Path(pwd.getpwuid(os.getuid()).pw_dir).resolve()
    assert Path(os.environ["HOME"]).resolve() == TEST_HOME.resolve() != user_home
    for var in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME", "XDG_STATE_HOME"):
        assert Path(os.environ[var]).resolve().is_relative_to(TEST_HOME.resolve()), var
    assert catalog.USER_DECODERS_DIR.resolve().is_relative_to(TEST_HOME.resolve())


def test_a_decoders_install_by_a_test_stays_in_the_sessions_home():
    """``nicrig decoders install`` with its default folder, as a user runs it: into the session's data folder."""
    done = subprocess.run([sys.executable, "-m", "nicrig", "decoders", "install"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    target = Path(os.environ["XDG_DATA_HOME"]) / "libsigrokdecode" / "decoders"
    assert (target / "pci" / "pd.py").is_file()
    assert f"installed {target}" in done.stdout
    assert catalog.sigrok_finds(["pci"]) == catalog.USER_DECODERS_DIR
    shutil.rmtree(target)  # a later test's export must find no decoders there, as on a fresh machine
    assert catalog.sigrok_finds(["pci"]) is None
