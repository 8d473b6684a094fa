"""The PyVISA drivers against the simulated instruments: what they fetch is exactly what the probes saw."""

from __future__ import annotations

import json

import numpy as np
import pytest
from nicrig.acquisition.capture import CaptureSet
from nicrig.acquisition.instruments import rigconfig
from nicrig.acquisition.instruments.driver import (
    parse_idn,
    parse_preamble,
    trigger_sample,
)
from nicrig.acquisition.instruments.registry import DRIVERS, driver_for
from siminstr import acquire_one, first_edge, rig_wires, serve

from nicrig.errors import NicrigError


def check_against_wires(path, source, wires_source, trigger_signal="FRAME#", falling=True, decimation=1):
    """Every channel of ``source`` equals the rig wire it is probed on, around the trigger edge."""
    with CaptureSet.open(path) as cs:
        src = cs.source(source)
        levels = {name: lv[::decimation] for name, lv in rig_wires(wires_source).levels.items()}
        edge = first_edge(levels[trigger_signal], falling, src.trigger_sample)
        start = edge - src.trigger_sample
        for name in src.channels:
            assert np.array_equal(src.read_channel(name), levels[name][start:start + src.num_samples]), name
        return src.describe()


@pytest.mark.parametrize("model, options", [
    ("keysight-msox4000", {}),
    ("keysight-msox4000", {"data_format": "WORD"}),
    ("keysight-msox3000", {}),
    ("rigol-mso5000", {"batch_points": 3000}),
    ("tektronix-mso5", {"batch_points": 3000}),
    ("tektronix-mso6", {}),
])
def test_each_driver_fetches_what_its_probes_saw(tmp_path, model, options):
    with serve(model) as srv:
        rate = srv.dialect.scope.max_rate_hz
        outcome = acquire_one(srv, tmp_path / "x.h5", **options)
    assert outcome.complete and outcome.missing() == []
    d = check_against_wires(tmp_path / "x.h5", "send_pci", "send_pci")
    assert d["num_samples"] == 10_000 and d["trigger_sample"] == 1_000 and d["mode"] == "timing"
    assert abs(d["samplerate_hz"] - rate) < 1e-6 * rate
    assert d["roles"]["frame"] == "FRAME#" and d["bus"]["kind"] == "pci"
    inst = d["instrument"]
    assert inst["model"] == model and len(inst["preambles"]) == 2 and inst["idn"].count(",") == 3
    with CaptureSet.open(tmp_path / "x.h5") as cs:
        row = cs.read_table("acquisition/instruments")[0]
        assert row["status"] == b"complete" and row["samples_fetched"] == 10_000 and row["trigger_host_ns"] > 0
        assert json.loads(cs.attrs["acquisition"])["complete"] is True


def test_a_lower_rate_and_the_trigger_in_the_middle(tmp_path):
    with serve("tektronix-mso5") as srv:
        rate = srv.dialect.scope.max_rate_hz / 2
        acquire_one(srv, tmp_path / "x.h5", sample_rate_hz=rate, trigger=rigconfig.parse_trigger("FRAME#", 0.5))
    d = check_against_wires(tmp_path / "x.h5", "send_pci", "send_pci", decimation=2)
    assert d["trigger_sample"] == 5_000 and abs(d["samplerate_hz"] - rate) < 1


def test_the_gmii_probe_on_four_flexchannels_decodes_to_the_frames_on_the_wire(tmp_path):
    import subprocess
    import sys

    with serve("tektronix-mso5", "probe") as srv:
        out = tmp_path / "probe.h5"
        acquire_one(srv, out, source="probe", record_length=60_000, batch_points=20_000,
                    trigger=rigconfig.parse_trigger("TX_EN:rising"))
    d = check_against_wires(out, "probe", "probe", "TX_EN", falling=False)
    assert d["bus"]["kind"] == "gmii" and d["roles"]["txd"] == "TXD"
    r = subprocess.run([sys.executable, "-m", "nicrig", "decode", str(out)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    with CaptureSet.open(out) as cs:
        frames = cs.read_table("decoded/probe/ethernet")
    # the stream's messages, one frame each, on its 15 us schedule (each off it by the sending host's noise, under
    # a microsecond), from the first (the trigger) on, intact
    tx = frames[frames["direction"] == b"tx"]
    assert len(tx) >= 4 and tx["fcs_ok"].all()
    assert list(tx["seq"]) == list(range(len(tx)))
    off_schedule = tx["t_ns"] - 15_000 * np.arange(len(tx))
    assert np.median(abs(off_schedule - np.median(off_schedule))) < 1_000


def test_the_pci_decoder_finds_the_simulator_s_transactions_in_a_fetched_record(tmp_path):
    import subprocess
    import sys

    from nicrig.acquisition.sim import profiles
    from nicrig.acquisition.sim.rig import simulate
    from siminstr import SCENARIO

    with serve("keysight-msox4000") as srv:
        out = tmp_path / "k.h5"
        acquire_one(srv, out, record_length=20_000, trigger=rigconfig.parse_trigger("FRAME#", 0.1))
    assert subprocess.run([sys.executable, "-m", "nicrig", "decode", str(out)], capture_output=True).returncode == 0
    truth_file = tmp_path / "truth.h5"
    simulate(SCENARIO, profiles.load("bus", "pci64-66"), profiles.load("nic", "intel-pro1000"),
             profiles.load("host", "supermicro-370dle"), truth_file)
    with CaptureSet.open(out) as cs, CaptureSet.open(truth_file) as truth:
        got = cs.read_table("decoded/send_pci/pci")
        want = truth.read_table("truth/send_pci/transactions")
        span = cs.source("send_pci").duration_ps
    # the record starts 10 % before the first FRAME#: the transactions that fit are the first ones of the run
    inside = want[want["t_end_ps"] < 0.85 * span]
    assert len(got) >= len(inside) > 5
    assert list(got["data_phases"][:len(inside)]) == list(inside["data_phases"])


def test_idn_preamble_and_trigger_arithmetic():
    ident = parse_idn("*IDN TEKTRONIX,MSO58,C012345,CF:91.1CT FV:1.30")
    assert (ident.manufacturer, ident.model) == ("TEKTRONIX", "MSO58")
    assert driver_for("KEYSIGHT TECHNOLOGIES", "MSO-X 4104A") is DRIVERS["keysight-msox4000"]
    assert driver_for("AGILENT TECHNOLOGIES", "MSO-X 3054A") is DRIVERS["keysight-msox3000"]
    assert driver_for("RIGOL TECHNOLOGIES", "MSO5354") is DRIVERS["rigol-mso5000"]
    assert driver_for("TEKTRONIX", "MSO46") is DRIVERS["tektronix-mso4"]
    assert driver_for("Siglent", "SDS2104X") is None
    p = parse_preamble("+0,+0,+1000,+1,+1.00000000E-09,-1.00000000E-07,+0,+1.0E+00,+0.0E+00,+0")
    assert p.points == 1000 and p.trigger_sample == 100
    assert trigger_sample(-5e-7, 2e-9, 10) == 260  # time(i) = (i - xreference) * xincrement + xorigin = 0
    for bad in ("1,2,3", "a,b,c,d,e,f,g,h,i,j", "+0,+0,+10,+1,0,0,0,0,0,0"):
        with pytest.raises(NicrigError, match="preamble"):
            parse_preamble(bad)
    with pytest.raises(NicrigError, match="manufacturer,model"):
        parse_idn("hello")
