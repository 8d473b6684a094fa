"""The simulated SCPI instrument as a client sees it: raw PyVISA + pyvisa-py over TCP, one dialect at a time."""

from __future__ import annotations

import numpy as np
import pytest
import pyvisa
from nicrig.acquisition.instruments.blocks import encode_block
from nicrig.acquisition.instruments.sim.server import (
    mnemonic_regex,
    parse_fault,
    parse_number,
    split_units,
)
from siminstr import rig_wires, serve, visa  # noqa: F401 (the visa fixture)

from nicrig.errors import UsageError


def test_headers_match_in_short_and_long_form_any_case():
    r = mnemonic_regex(":WAVeform:SOURce")
    assert all(r.match(h) for h in (":WAVEFORM:SOURCE", ":WAV:SOUR", "WAV:SOURCE"))
    assert not r.match(":WAVE:SOUR") and not r.match(":WAV:SOURC")
    pod = mnemonic_regex(":POD#:THReshold")
    assert pod.match(":POD2:THR").groups() == ("2",) and pod.match(":POD:THRESHOLD").groups() == ("",)
    err = mnemonic_regex(":SYSTem:ERRor[:NEXT]")
    assert err.match(":SYST:ERR") and err.match(":SYSTEM:ERROR:NEXT")
    assert split_units(':WAV:SOUR POD1;:WAV:FORM BYTE;*IDN?') == [":WAV:SOUR POD1", ":WAV:FORM BYTE", "*IDN?"]
    assert parse_number("250MHZ") == 250e6 and parse_number("1.5V") == 1.5 and parse_number("100E-6") == 100e-6


@pytest.mark.parametrize("text, fault", [
    ("slow=0.5", ("slow", None, 0.5)), ("slow=2@3", ("slow", 3, 2.0)), ("drop-mid-block@2", ("drop-mid-block", 2, 0)),
    ("truncated-block", ("truncated-block", 1, 0)), ("garbage@4", ("garbage", 4, 0)),
])
def test_faults_parse(text, fault):
    f = parse_fault(text)
    assert (f.kind, f.at_block, f.seconds) == fault


@pytest.mark.parametrize("text", ["explode", "slow", "slow=x", "drop-mid-block@0", "garbage=1", 'error=-1', "slow=-1"])
def test_bad_faults_are_refused(text):
    with pytest.raises(UsageError, match="fault"):
        parse_fault(text)


def test_keysight_pod_data_by_its_documented_commands(visa):
    with serve("keysight-msox4000") as srv:
        scope = visa(srv)
        assert scope.query("*IDN?").startswith("KEYSIGHT TECHNOLOGIES,MSO-X 4104A,")
        scope.write(":WAVeform:POINts:MODE RAW;:WAVeform:POINts 2000;:TIMebase:RANGe 7.5E-6")
        scope.write(":TRIGger:EDGE:SOURce D0;:TRIGger:EDGE:SLOPe NEGative;:TIMebase:REFerence LEFT")
        scope.query(":TER?")
        scope.write(":SINGle")
        while scope.query(":TER?") != "+1":
            pass
        while int(scope.query(":OPERegister:CONDition?")) & 8:
            pass
        scope.write(":WAVeform:SOURce POD1;:WAVeform:UNSigned ON;:WAVeform:FORMat BYTE")
        pre = scope.query(":WAVeform:PREamble?").split(",")
        assert len(pre) == 10 and int(pre[2]) == 2000
        pod1 = scope.query_binary_values(":WAVeform:DATA?", datatype="B", container=np.array)
        scope.write(":WAVeform:FORMat WORD;:WAVeform:BYTeorder MSBFirst")
        words = scope.query_binary_values(":WAVeform:DATA?", datatype="H", is_big_endian=True, container=np.array)
        assert np.array_equal(words, pod1) and scope.query(":SYSTem:ERRor?") == '+0,"No error"'
        xinc, xorg, xref = float(pre[4]), float(pre[5]), int(pre[6])
        trig = round(xref - xorg / xinc)
        frame = pod1 & 1  # FRAME# is D0
        assert trig == 200 and frame[trig - 1] == 1 and frame[trig] == 0 and frame[:trig].all()
        # the same pod bits, seen on the rig's wires: FRAME# at the first falling edge with 200 samples before it
        wires = rig_wires("send_pci").levels["FRAME#"]
        edge = int(np.flatnonzero((wires[:-1] == 1) & (wires[1:] == 0))[0]) + 1
        assert np.array_equal(frame, wires[edge - 200:edge + 1800])


def test_errors_are_queued_not_answered(visa):
    with serve("keysight-msox4000") as srv:
        scope = visa(srv)
        scope.write(":NO:SUCH:THING 5")
        scope.write(":TIMebase:RANGe 1E6")
        assert scope.query(":SYSTem:ERRor?") == '-113,"Undefined header"'
        assert scope.query(":SYSTem:ERRor?") == '-222,"Data out of range"'
        assert scope.query(":SYSTem:ERRor?") == '+0,"No error"'
        assert scope.query("*IDN?;*OPC?").endswith(";1")  # two answers to one message, joined by ';'


def test_rigol_reads_its_memory_in_batches_with_9_digit_headers(visa):
    with serve("rigol-mso5000") as srv:
        scope = visa(srv)
        assert scope.query("*IDN?").startswith("RIGOL TECHNOLOGIES,MSO5104,")
        scope.write(":ACQuire:MDEPth 10000")
        scope.write(":TIMebase:MAIN:SCALe 3.75E-6")
        scope.write(":TRIGger:EDGE:SOURce D0")
        scope.write(":SINGle")
        while scope.query(":TRIGger:STATus?") != "STOP":
            pass
        scope.write(":WAVeform:SOURce D0;:WAVeform:MODE RAW;:WAVeform:FORMat BYTE")
        assert scope.query(":WAVeform:PREamble?").startswith("0,2,10000,1,")
        scope.write(":WAVeform:STARt 1;:WAVeform:STOP 300000")
        assert scope.query(":WAVeform:DATA?") == "#9000000000"  # more than a batch, or past the end: no data
        assert scope.query(":SYSTem:ERRor?") == '-222,"Data out of range"'
        scope.write(":WAVeform:STARt 1;:WAVeform:STOP 4000")
        scope.write(":WAVeform:DATA?")
        assert scope.read_bytes(11) == b"#9000004000"  # read by count: the data may hold newline bytes
        assert scope.read_bytes(4001)[-1:] == b"\n"


def test_tektronix_events_and_hex_digit_curve_headers(visa):
    with serve("tektronix-mso5") as srv:
        scope = visa(srv)
        assert scope.query("*IDN?").startswith("*IDN TEKTRONIX,MSO54,")  # HEADer is ON after power-up
        scope.write("HEADer OFF")
        scope.write("BOGUS:COMMAND 1")
        assert int(scope.query("*ESR?")) & 32
        assert scope.query("ALLEv?") == '113,"Undefined header"'
        assert scope.query("*ESR?") == "0" and scope.query("ALLEv?").startswith('0,"No events')
        for cmd in ("ACQuire:STOPAfter SEQuence", "HORizontal:MODE MANual", "HORizontal:MODE:RECOrdlength 1000",
                    "TRIGger:A:EDGE:SOUrce CH1_D0", "ACQuire:STATE ON"):
            scope.write(cmd)
        while scope.query("ACQuire:STATE?") != "0":
            pass
        scope.write("DATa:SOUrce CH2_DAll;DATa:ENCdg RPBinary;DATa:WIDth 1;DATa:STARt 1;DATa:STOP 1000")
        scope.write("CURVe?")
        assert scope.read_bytes(6) == b"#41000"
        curve = np.frombuffer(scope.read_bytes(1001)[:-1], dtype=np.uint8)
        clk = curve & 1  # CH2_D0 is the PCI clock: 4 samples a period, high for the first 2
        assert set(np.diff(np.flatnonzero(np.diff(clk)))) == {2}


def test_unknown_models_and_unwired_maps_are_refused():
    from nicrig.acquisition.instruments import probemap
    from nicrig.acquisition.instruments.sim.models import make_server

    with pytest.raises(UsageError, match="unknown simulated model"):
        make_server("keysight-9999", rig_wires(), probemap.load("pci-control"))
    with pytest.raises(UsageError, match="TXD"):
        make_server("tektronix-mso5", rig_wires(), probemap.load("gmii-probe"))
    assert encode_block(b"x" * 12) == b"#212" + b"x" * 12


@pytest.mark.parametrize("model", ["keysight-msox4000", "rigol-mso5000", "tektronix-mso5"])
def test_random_bytes_do_not_break_the_instrument(model):
    import random
    import socket

    rnd = random.Random(7)
    with serve(model) as srv:
        with socket.create_connection(srv.address, timeout=5) as s:
            for _ in range(200):
                junk = bytes(rnd.randrange(256) for _ in range(rnd.randrange(1, 80))).replace(b"\n", b" ")
                s.sendall(junk + b"\n")
            s.sendall(b"x" * 70_000 + b"\n")  # longer than any program message
            s.sendall(b"*IDN?\n")
            model = srv.dialect.idn.split(",")[1].encode()
            answer = b""
            while not (model in answer and answer.endswith(b"\n")):  # junk that happened to be a query answers too
                answer += s.recv(65536)
        assert answer.rstrip(b"\n").split(b"\n")[-1].endswith(srv.dialect.idn.encode())
        assert len(srv.dialect.scope.errors) > 0
