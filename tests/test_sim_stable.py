"""The simulator's output stays byte-identical on fixed seeds while its speed is worked on (issue 18, point 5).

Each case simulates a short run and hashes every ground-truth table and every
source's samples and timestamps. The digests were taken from the model as
calibrated (``bench/calibration.py``); a change that is meant to alter the
model's behaviour changes them and must say so in its commit message, a
change that is only meant to make it faster must not.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from conftest import simulate_set
from nicrig.acquisition.capture import CaptureSet
from nicrig.acquisition.sim.rig import Recording

#: (name, profiles, recording, scenario) -> sha256 of the truth tables and the sources, in name order.
CASES = {
    "intel-stream-11us": (dict(nic="intel-pro1000", bus="pci64-66", host="supermicro-370dle"), Recording(),
                          dict(kind="stream", size_bytes=1400, spacing_us=11, count=60, seed=7)),
    "sk-latency-ad-32": (dict(nic="sk9843", bus="pci32-33", host="supermicro-370dle"), Recording(with_ad=True),
                         dict(kind="latency", size_bytes=3000, count=3, seed=3)),
    "alteon-stream-timing": (dict(nic="alteon-acenic", bus="pci64-33", host="ibm-das"),
                             Recording(samples_per_clock=4), dict(kind="stream", size_bytes=900, spacing_us=0,
                                                                   count=40, seed=5)),
    "intel-p4dp6-latency": (dict(nic="intel-pro1000", bus="pci64-66", host="supermicro-p4dp6"), Recording(),
                            dict(kind="latency", size_bytes=64, count=4, seed=11)),
}
DIGESTS = {
    "intel-stream-11us": "d9aef4429c8e8d063cdcda49c1e2d66c6a63b4615d7e52bcb79b4fc857a667f6",
    "sk-latency-ad-32": "ef3e827f46d84bdb19a5dd9e72e36504c1f4c1a6d9db98ab631c984b5ce7a8f2",
    "alteon-stream-timing": "0ef276fa2d2d3f09880caff6e40b31b67b43885b114c64a08e59917e191c514d",
    "intel-p4dp6-latency": "e2557c21ab6ec0914597c2a6b9c1139f2080bab8abe26fccea11bf3619df701f",
}


def digest(path: Path) -> str:
    """SHA-256 over every truth table and every source's packed samples and timestamps, by name."""
    h = hashlib.sha256()
    with CaptureSet.open(path) as cs:
        for name in sorted(n for n in cs.table_names() if n.startswith("truth/")):
            h.update(name.encode())
            h.update(cs.read_table(name).tobytes())
        for name, src in sorted(cs.sources.items()):
            h.update(name.encode())
            h.update(src.read_packed().tobytes())
            if src.mode == "state":
                h.update(src.times_ps().tobytes())
    return h.hexdigest()


@pytest.mark.parametrize("case", sorted(CASES))
def test_simulated_capture_is_byte_identical_to_the_calibrated_model(case, tmp_path):
    names, recording, scenario = CASES[case]
    path = simulate_set(tmp_path, case, recording=recording, **names, **scenario)
    assert digest(path) == DIGESTS[case]
