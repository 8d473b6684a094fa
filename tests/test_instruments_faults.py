"""What goes wrong with instruments: every fault gives a clear error, and a valid file keeps what arrived."""

from __future__ import annotations

import json

import numpy as np
import pytest
from nicrig.acquisition.capture import CaptureSet
from nicrig.acquisition.instruments import rigconfig, session
from nicrig.acquisition.instruments.driver import (
    InstrumentError,
    UnsupportedSetting,
    WrongInstrument,
)
from siminstr import acquire_one, config, first_edge, member, rig_wires, serve

from nicrig.errors import NicrigError


def kept_prefix_matches_the_wires(path, name="send_pci"):
    """The samples kept are the probes' first samples: pod bits that arrived are right, the others 0."""
    with CaptureSet.open(path) as cs:  # opening validates the file
        src = cs.source(name)
        levels = rig_wires(name).levels
        edge = first_edge(levels["FRAME#"], True, src.trigger_sample)
        start = edge - src.trigger_sample
        for ch in ("FRAME#", "IRDY#", "TRDY#"):  # pod 1, which arrived first
            n = src.num_samples
            assert np.array_equal(src.read_channel(ch), levels[ch][start:start + n]), ch
        return src.num_samples, src.notes, cs.notes, cs.read_table("acquisition/instruments")


@pytest.mark.parametrize("model, fault, options, kept, message", [
    # Rigol: batches of 4000; the 2nd block (pod 2 of batch 1) stops half-way and the connection closes
    ("rigol-mso5000", "drop-mid-block@2", {"batch_points": 4000}, {1: 4000, 2: 2000}, "closed the connection"),
    # Keysight: POD1's block says 10000 bytes and holds 5000
    ("keysight-msox4000", "truncated-block@1", {}, {1: 5000, 2: 0}, "5,000 of 10,000 bytes"),
    # Tektronix: the 3rd CURVe? answer is noise, not a block; batch 1 had arrived
    ("tektronix-mso5", "garbage@3", {"batch_points": 4000}, {1: 4000, 2: 4000}, "not a definite-length block"),
    # an answer slower than the I/O timeout
    ("keysight-msox4000", "slow=3@2", {"io_timeout_s": 1.0}, {1: 10000, 2: 0}, "no block header arrived"),
])
def test_a_broken_transfer_keeps_what_arrived(tmp_path, model, fault, options, kept, message):
    out = tmp_path / "x.h5"
    with serve(model, faults=[fault]) as srv:
        outcome = acquire_one(srv, out, **options)
    m = outcome.members[0]
    assert not outcome.complete and m.status == "partial" and m.pods_received == kept
    assert message in "; ".join(m.errors)
    n, source_notes, root_notes, table = kept_prefix_matches_the_wires(out)
    assert n == max(kept.values())
    assert "INCOMPLETE" in source_notes and f"{n:,} of 10,000 samples" in root_notes
    assert table["status"][0] == b"partial" and table["samples_fetched"][0] == n


def test_answers_that_are_slow_but_in_time_are_fine(tmp_path):
    with serve("rigol-mso5000", faults=["slow=0.05"]) as srv:
        outcome = acquire_one(srv, tmp_path / "x.h5", record_length=1000, batch_points=1000)
    assert outcome.complete


@pytest.mark.parametrize("model", ["keysight-msox4000", "tektronix-mso5"])
def test_errors_the_instrument_reports_while_acquiring_are_kept_with_the_data(tmp_path, model):
    with serve(model, faults=['error=-350,"Queue overflow"']) as srv:
        outcome = acquire_one(srv, tmp_path / "x.h5")
    m = outcome.members[0]
    assert m.status == "suspect" and not outcome.complete and m.fetched == 10_000
    assert "350" in m.errors[0] and "Queue overflow" in m.errors[0] and "while acquiring" in m.errors[0]
    with CaptureSet.open(tmp_path / "x.h5") as cs:
        assert "reported errors while acquiring" in cs.source("send_pci").notes


def test_errors_left_from_before_are_cleared_and_noted(tmp_path):
    with serve("keysight-msox4000") as srv:
        srv.dialect.scope.push_error(-113, "Undefined header")
        outcome = acquire_one(srv, tmp_path / "x.h5")
    assert outcome.complete
    with CaptureSet.open(tmp_path / "x.h5") as cs:
        assert 'cleared): -113,"Undefined header"' in cs.source("send_pci").notes


def test_the_wrong_instrument_is_refused_before_anything_is_armed(tmp_path):
    with serve("keysight-msox4000") as srv:
        with pytest.raises(WrongInstrument, match="is a KEYSIGHT TECHNOLOGIES MSO-X 4104A.*rigol-mso5000 driver"):
            member(config(srv, model="rigol-mso5000"))
        assert srv.dialect.scope.state == "stopped"


@pytest.mark.parametrize("model, options, message", [
    ("keysight-msox4000", {"sample_rate_hz": 1e9}, "samples at 266.667 MHz, not the 1000 MHz asked"),
    ("keysight-msox4000", {"trigger": rigconfig.parse_trigger("FRAME#", 0.3)}, "0.1, 0.5 or 0.9"),
    ("tektronix-mso5", {"sample_rate_hz": 1e9}, 'refused .HORizontal:MODE:SAMPLERate.*222,"Data out of range"'),
    ("rigol-mso5000", {"record_length": 12_345}, "memory depths are 1,000, 10,000"),
    ("rigol-mso5000", {"trigger": rigconfig.parse_trigger("external")}, "no external trigger input"),
])
def test_unsupported_settings_are_clear_errors_and_nothing_is_written(tmp_path, model, options, message):
    with serve(model) as srv:
        m = member(config(srv, **options))
        with pytest.raises(UnsupportedSetting, match=message):
            session.prepare([m])
        assert srv.dialect.scope.state == "stopped"
    assert not (tmp_path / "x.h5").exists()


def test_a_probe_map_with_more_pods_than_the_instrument(tmp_path):
    with serve("keysight-msox4000", "send_pci") as srv:
        with pytest.raises(UnsupportedSetting, match="uses pod 3; a keysight-msox4000 has 2"):
            session.prepare([member(config(srv, probe_map="gmii-probe", trigger=rigconfig.parse_trigger("TX_EN")))])


def test_no_trigger_means_no_file_and_says_so(tmp_path):
    with serve("keysight-msox4000") as srv:
        with pytest.raises(InstrumentError, match="nothing written: send_pci: nothing fetched .no trigger: did not "
                                                  "trigger within 0.5 s"):
            acquire_one(srv, tmp_path / "x.h5", trigger=rigconfig.parse_trigger("PERR#:rising"), timeout_s=0.5)
    assert not (tmp_path / "x.h5").exists()


def test_one_instrument_dropping_does_not_cost_the_others(tmp_path):
    out = tmp_path / "two.h5"
    with serve("keysight-msox4000") as good, serve("rigol-mso5000", "recv_pci", faults=["drop-mid-block@1"]) as bad:
        members = [member(config(good)), member(config(bad, "recv_pci", trigger=rigconfig.parse_trigger("TRIG:rising")))]
        session.prepare(members)
        outcome = session.run(members, out, timeout_s=5)
    assert [m.status for m in outcome.members] == ["complete", "partial"]
    kept_prefix_matches_the_wires(out)
    with CaptureSet.open(out) as cs:
        assert cs.source("recv_pci").num_samples == 2000
        info = json.loads(cs.attrs["acquisition"])
        assert info["complete"] is False and info["missing"][0].startswith("recv_pci: 2,000 of 10,000 samples")


def test_an_unreachable_resource_and_a_bad_resource_string(tmp_path):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens there once closed
    cfg = rigconfig.InstrumentConfig(source="x", resource=f"TCPIP0::127.0.0.1::{port}::SOCKET",
                                     probe_map="pci-control", sample_rate_hz=1e6, record_length=1000)
    with pytest.raises(NicrigError, match=f"TCPIP0::127.0.0.1::{port}::SOCKET failed .*Connection refused"):
        rigconfig.open_instrument(cfg)
    with pytest.raises(NicrigError, match="not a VISA resource string"):
        rigconfig.open_instrument(rigconfig.InstrumentConfig(**{**cfg.__dict__, "resource": "NOT::A::RESOURCE"}))
