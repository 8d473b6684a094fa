"""Rig configurations, and the documented plain-PyVISA script reading what nicrig acquire stores."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from nicrig.acquisition.capture import CaptureSet
from nicrig.acquisition.instruments import rigconfig
from siminstr import acquire_one, serve

from nicrig.errors import UsageError

ROOT = Path(__file__).resolve().parents[1]


def test_the_plain_pyvisa_script_in_the_docs_reads_what_nicrig_stores(tmp_path):
    doc = (ROOT / "docs" / "instruments.md").read_text()
    script = re.search(r"<!-- test: plain-pyvisa -->\n```python\n(.*?)```", doc, re.DOTALL)[1]
    (tmp_path / "read_pods.py").write_text(script)
    with serve("keysight-msox4000") as srv:
        r = subprocess.run([sys.executable, str(tmp_path / "read_pods.py"), srv.resource, str(tmp_path / "p.npz")],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        assert "20000 points, 266.67 MSa/s, trigger at sample 2000" in r.stdout
        assert 'error queue: +0,"No error"' in r.stdout
        acquire_one(srv, tmp_path / "cap.h5", record_length=20_000)
    pods = np.load(tmp_path / "p.npz")
    with CaptureSet.open(tmp_path / "cap.h5") as cs:
        src = cs.source("send_pci")
        for name in src.channels:  # pci-control: pod 1 bit k is channel k; pod 2 carries CLK .. REF
            pod, bit = (1, src.channel_index(name)) if src.channel_index(name) < 8 else \
                (2, {"CLK": 0, "PERR#": 1, "REQ64#": 2, "ACK64#": 3, "TRIG": 6, "REF": 7}[name])
            assert np.array_equal(src.read_channel(name), (pods[f"pod{pod}"] >> bit) & 1), name


def test_the_example_rig_configuration_loads():
    rig = rigconfig.load(ROOT / "data" / "rigs" / "simulated-rig.toml")
    assert [c.source for c in rig.instruments] == ["send_pci", "recv_pci", "probe"]
    assert rig.instruments[1].trigger == rigconfig.Trigger("TRIG", "rising", 0.1)
    assert rig.instruments[2].trigger.signal is None and rig.deskew_signal == "REF"
    assert abs(rig.instruments[0].sample_rate_hz - 266.67e6) < 1


BASE = '[[instrument]]\nsource = "a"\nsigrok_driver = "demo"\nsample_rate_hz = 1e6\nrecord_length = 100\n'


@pytest.mark.parametrize("text, message", [
    ("", "no \\[\\[instrument\\]\\] tables"),
    ("colour = 1\n" + BASE, "unknown key"),
    (BASE + "wobble = 2\n", "unknown key\\(s\\) \\['wobble'\\]"),
    (BASE.replace('sigrok_driver = "demo"', 'resource = "TCPIP0::h::1::SOCKET"'), "needs a probe map"),
    (BASE.replace('sigrok_driver = "demo"\n', ''), "a VISA resource or a sigrok driver"),
    (BASE.replace("record_length = 100", "record_length = 1.5"), "record_length must be an integer"),
    (BASE.replace("1e6", '"fast"'), "bad sample rate"),
    (BASE + 'trigger = { signal = "D0", slope = "up" }\n', "trigger slope 'up'"),
    (BASE + "trigger = 5\n", "trigger must be"),
    (BASE + BASE, "the same source"),
    ('[udpmon]\nargs = ["serve"]\n' + BASE, "\\[udpmon\\] args"),
    (BASE + 'format = "ASCII"\n', "BYTE or WORD"),
    ('deskew_file = "missing.toml"\n' + BASE, "deskew file .* does not exist"),
    ("[[instrument\n", "not valid TOML"),
])
def test_bad_configurations_are_refused_with_the_reason(tmp_path, text, message):
    f = tmp_path / "rig.toml"
    f.write_text(text)
    with pytest.raises(UsageError, match=message):
        rigconfig.load(f)


def test_a_deskew_file_sets_the_offsets(tmp_path):
    (tmp_path / "cal.toml").write_text("[offsets_ps]\na = -1234\n")
    (tmp_path / "rig.toml").write_text('deskew_file = "cal.toml"\n' + BASE)
    assert rigconfig.load(tmp_path / "rig.toml").instruments[0].offset_ps == -1234


values = st.one_of(st.none(), st.booleans(), st.integers(-10**12, 10**12), st.floats(allow_nan=True),
                   st.text(max_size=12), st.lists(st.text(max_size=5), max_size=3),
                   st.dictionaries(st.text(max_size=6), st.integers(), max_size=2))


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from(sorted(rigconfig.INSTRUMENT_KEYS) + ["junk"]), values, max_size=8))
def test_any_instrument_table_is_accepted_or_refused_cleanly(raw):
    try:
        cfg = rigconfig.instrument_from_dict(raw, "fuzz", Path("."))
    except UsageError:
        return
    cfg.check()
    for text in (cfg.source, cfg.resource, cfg.model, cfg.sigrok_driver, cfg.sigrok_conn, cfg.probe_map):
        assert text is None or isinstance(text, str)
    assert cfg.sample_rate_hz > 0 and cfg.record_length >= 1


@given(st.text(max_size=30))
def test_any_trigger_text_parses_or_is_refused(text):
    try:
        t = rigconfig.parse_trigger(text)
    except UsageError:
        return
    assert t.slope in rigconfig.SLOPES and (t.signal is None or t.signal)
