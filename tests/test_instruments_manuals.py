"""The simulated instruments run their vendors' own programming examples, driven by plain PyVISA over TCP.

Each flow is the one the vendor's programmer manual shows (the sequence of
commands and the waits it uses), sent with pyvisa + pyvisa-py over a socket:
Keysight InfiniiVision's ":DIGitize then *OPC?" blocking synchronization and
its waveform queries before and after an acquisition, Rigol MSO5000's
"read the internal memory" procedure, and Tektronix 4/5/6 Series' single
sequence with ``*OPC?``. Then the SCPI/IEEE 488.2 parser rules: an overlong
message (-223) and a non-finite number (-222) leave nothing of their line
executed and the connection usable.
"""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
import threading
import time

import numpy as np
import pytest
import pyvisa
from siminstr import rig_wires, serve, visa  # noqa: F401 (the visa fixture)


def frame_edge(pre: int) -> np.ndarray:
    """FRAME# on the rig's wires from ``pre`` samples before its first falling edge (the test's own arithmetic)."""
    wires = rig_wires("send_pci").levels["FRAME#"]
    edge = int(np.flatnonzero((wires[:-1] == 1) & (wires[1:] == 0))[0]) + 1
    return wires[edge - pre:]


@pytest.mark.parametrize("model", ["keysight-msox4000", "keysight-msox3000"])
def test_keysight_digitize_blocks_until_the_record_is_there(visa, model):
    with serve(model, trigger_after_s=0.3) as srv:
        scope = visa(srv)
        scope.write("*CLS")
        # before any acquisition: a prompt answer that says "no data" and an error in the queue, never a hang
        pre = scope.query(":WAVeform:PREamble?").split(",")
        assert len(pre) == 10 and int(pre[2]) == 0 and float(pre[4]) == 0.0
        assert scope.query_binary_values(":WAVeform:DATA?", datatype="B") == []
        assert errors(scope, model) == [-230, -230]
        assert scope.query("*ESR?") == "+16" and scope.query("*ESR?") == "+0"  # execution error, cleared by reading
        scope.write(":WAVeform:POINts:MODE RAW;:WAVeform:POINts 2000;:TIMebase:RANGe 7.5E-6")
        scope.write(":TRIGger:EDGE:SOURce D0;:TRIGger:EDGE:SLOPe NEGative;:TIMebase:REFerence LEFT")
        # the guide's blocking synchronization: :DIGitize is sequential, *OPC? answers once it is done
        scope.write(":DIGitize POD1,POD2")
        assert scope.query("*OPC?") == "1"
        assert not int(scope.query(":OPERegister:CONDition?")) & 8  # stopped after :DIGitize
        scope.write(":WAVeform:SOURce POD1;:WAVeform:UNSigned ON;:WAVeform:FORMat BYTE")
        assert scope.query(":WAVeform:POINts:MODE?") == "RAW" and int(scope.query(":WAVeform:POINts?")) == 2000
        pre = scope.query(":WAVeform:PREamble?").split(",")
        pod1 = scope.query_binary_values(":WAVeform:DATA?", datatype="B", container=np.array)
        assert int(pre[2]) == len(pod1) == 2000
        trig = round(int(pre[6]) - float(pre[5]) / float(pre[4]))
        assert trig == 200 and np.array_equal(pod1 & 1, frame_edge(200)[:2000])
        scope.write(":DIGitize")  # no sources: the displayed channels
        scope.write(":WAVeform:FORMat WORD;:WAVeform:BYTeorder LSBFirst")
        words = scope.query_binary_values(":WAVeform:DATA?", datatype="H", container=np.array)
        assert np.array_equal(words, pod1)
        assert scope.query("*ESR?") == "+0" and scope.query(":SYSTem:ERRor?") == '+0,"No error"'
        scope.write(":DIGitize CHANnel9")
        assert int(scope.query("*ESR?")) & 16  # execution error bit
        assert scope.query(":SYSTem:ERRor?").startswith("-224,")


def test_keysight_single_run_stop_and_block_headers(visa):
    with serve("keysight-msox4000", trigger_after_s=0.05) as srv:
        scope = visa(srv)
        scope.write(":WAVeform:POINts:MODE RAW;:WAVeform:POINts 1000;:TRIGger:EDGE:SOURce D0")
        scope.write(":RUN")
        assert int(scope.query(":OPERegister:CONDition?")) & 8
        scope.write(":STOP")
        assert not int(scope.query(":OPERegister:CONDition?")) & 8
        scope.query(":TER?")
        scope.write(":SINGle")
        while scope.query(":TER?") != "+1":
            pass
        scope.write(":WAVeform:SOURce POD1;:WAVeform:FORMat BYTE;:WAVeform:DATA?")
        assert scope.read_bytes(10) == b"#800001000"  # the guide's 8-digit block header
        assert len(scope.read_bytes(1001)) == 1001


def test_rigol_reads_its_internal_memory_as_the_guide_says(visa):
    with serve("rigol-mso5000") as srv:
        scope = visa(srv)
        scope.write(":WAVeform:MODE RAW;:WAVeform:FORMat BYTE")
        assert scope.query(":WAVeform:PREamble?").startswith("0,2,0,1,")  # nothing acquired yet: 0 points
        assert scope.query_binary_values(":WAVeform:DATA?", datatype="B") == []
        assert errors(scope, "rigol-mso5000") == [-230, -230]
        scope.write(":ACQuire:MDEPth 10000;:TIMebase:MAIN:SCALe 3.75E-6;:TRIGger:EDGE:SOURce D0")
        scope.write(":SINGle")
        while scope.query(":TRIGger:STATus?") != "STOP":
            pass
        scope.write(":STOP")
        scope.write(":WAVeform:SOURce D0")
        scope.write(":WAVeform:MODE RAW")
        scope.write(":WAVeform:FORMat BYTE")
        pre = scope.query(":WAVeform:PREamble?").split(",")
        points = int(pre[2])
        parts = []
        for start in range(1, points + 1, 4000):
            scope.write(f":WAVeform:STARt {start}")
            scope.write(f":WAVeform:STOP {min(start + 3999, points)}")
            parts.append(scope.query_binary_values(":WAVeform:DATA?", datatype="B", container=np.array))
        data = np.concatenate(parts)
        trig = round(-float(pre[5]) / float(pre[4]))
        assert len(data) == points == 10_000 and np.array_equal(data & 1, frame_edge(trig)[:points])
        assert scope.query(":SYSTem:ERRor?") == '0,"No error"'


def test_tektronix_single_sequence_with_opc(visa):
    with serve("tektronix-mso5", trigger_after_s=0.3) as srv:
        scope = visa(srv)
        scope.write("HEADer OFF")
        scope.write("DATa:SOUrce CH1_DAll;DATa:ENCdg RPBinary;DATa:WIDth 1")
        assert scope.query("WFMOutpre:NR_Pt?") == "0"  # no record yet: answered at once
        assert scope.query_binary_values("CURVe?", datatype="B", header_fmt="ieee", expect_termination=True) == []
        assert int(scope.query("*ESR?")) & 16 and scope.query("ALLEv?").startswith("230,")
        for cmd in ("HORizontal:MODE MANual", "HORizontal:MODE:RECOrdlength 2000", "HORizontal:POSition 10",
                    "TRIGger:A:EDGE:SOUrce CH1_D0", "TRIGger:A:EDGE:SLOpe FALL"):
            scope.write(cmd)
        scope.write("ACQuire:STOPAfter SEQuence")
        scope.write("ACQuire:STATE ON")
        assert scope.query("*OPC?") == "1"  # answered when the single sequence is complete
        assert scope.query("ACQuire:STATE?") == "0"
        scope.write("DATa:STARt 1;DATa:STOP 2000")
        assert '"CH1_DALL, 2000 points' in scope.query("WFMOutpre?")
        xincr, xzero = float(scope.query("WFMOutpre:XINcr?")), float(scope.query("WFMOutpre:XZEro?"))
        scope.write("CURVe?")
        assert scope.read_bytes(6) == b"#42000"
        curve = np.frombuffer(scope.read_bytes(2001)[:-1], dtype=np.uint8)
        trig = round(-xzero / xincr)
        assert trig == 200 and np.array_equal(curve & 1, frame_edge(200)[:2000])
        scope.write("*OPC")
        assert int(scope.query("*ESR?")) == 1  # operation complete, no error


HOSTILE = {
    # a number that is not finite, anywhere in a message, runs none of it: -222
    ":WAVeform:POINts 1e999": (-222, "keysight-msox4000"),
    ":WAVeform:POINts 2000;:WAVeform:POINts NAN": (-222, "keysight-msox4000"),
    ":ACQuire:MDEPth 10000;:TIMebase:MAIN:SCALe -INF": (-222, "rigol-mso5000"),
    "HORizontal:MODE:RECOrdlength 2000;HORizontal:POSition 1E400": (-222, "tektronix-mso5"),
    # an unknown header after a good command: -113, the good one does not run either
    ":WAVeform:POINts 2000;:NO:SUCH 1": (-113, "keysight-msox4000"),
}


@pytest.mark.parametrize("message", list(HOSTILE))
def test_a_line_with_a_parse_error_runs_none_of_its_commands(visa, message):
    code, model = HOSTILE[message]
    with serve(model) as srv:
        scope = visa(srv)
        before = srv.dialect.scope.points, srv.dialect.scope.decimation
        scope.write(message)
        assert (srv.dialect.scope.points, srv.dialect.scope.decimation) == before
        assert errors(scope, model)[0] == code


def errors(scope, model: str) -> list[int]:
    """The error codes the instrument queued, read as its manual says (Tektronix through *ESR? and ALLEv?)."""
    if model.startswith("tektronix"):
        scope.write("HEADer OFF")
        scope.query("*ESR?")
        return [-int(c) for c in re.findall(r'(\d+),"', scope.query("ALLEv?")) if int(c)]
    codes = []
    while not (answer := scope.query(":SYSTem:ERRor?")).startswith(("0,", "+0,")):
        codes.append(int(answer.split(",")[0]))
    return codes


@pytest.mark.parametrize("model", ["keysight-msox4000", "rigol-mso5000", "tektronix-mso5"])
def test_an_overlong_line_is_refused_whole_and_the_connection_stays(model, capfd):
    with serve(model) as srv, socket.create_connection(srv.address, timeout=5) as s:
        # longer than MAX_MESSAGE; were its tail read as a message of its own, it would queue -113 or clear the queue
        s.sendall(b"*IDN?;" + b"x" * 70_000 + b";*CLS" * 5 + b"\n")
        s.sendall(b"*IDN?\n")
        answer = b""
        while not answer.endswith(b"\n"):
            answer += s.recv(65536)
        assert answer == (b"*IDN " if model.startswith("tek") else b"") + srv.dialect.idn.encode() + b"\n"
        assert list(srv.dialect.scope.errors) == [(-223, "Too much data")]
    assert "Traceback" not in capfd.readouterr().err


@pytest.mark.parametrize("model", ["keysight-msox4000", "rigol-mso5000", "tektronix-mso5"])
def test_every_numeric_setting_refuses_non_finite_values_without_a_traceback(visa, model, capfd):
    with serve(model) as srv:
        scope = visa(srv)
        for value in ("1e999", "-1E400", "NAN", "INFinity", "NINF", "9" * 400):
            for cmd in NUMERIC[model]:
                scope.write(f"{cmd} {value}")
        assert scope.query("*IDN?").endswith(srv.dialect.idn)
        codes = errors(scope, model)
        assert codes and set(codes) == {-222}
    assert "Traceback" not in capfd.readouterr().err


NUMERIC = {
    "keysight-msox4000": [":WAVeform:POINts", ":TIMebase:RANGe", ":POD1:THReshold"],
    "rigol-mso5000": [":ACQuire:MDEPth", ":TIMebase:MAIN:SCALe", ":WAVeform:STARt", ":WAVeform:STOP"],
    "tektronix-mso5": ["HORizontal:MODE:RECOrdlength", "HORizontal:POSition", "DATa:STARt", "DATa:WIDth"],
}


@pytest.mark.parametrize("model", ["keysight-msox4000", "rigol-mso5000", "tektronix-mso5"])
def test_a_full_error_queue_keeps_the_oldest_errors_and_ends_in_queue_overflow(visa, model):
    """SCPI-1999 volume 2 §21.8: first in, first out; on overflow the last entry becomes -350 "Queue overflow"
    and later errors are not queued, so the first error (usually the cause) is still there to read."""
    from nicrig.acquisition.instruments.sim.scope import ERROR_QUEUE_LENGTH

    with serve(model) as srv:
        scope = visa(srv)
        scope.write(f"{NUMERIC[model][0]} 1e999")  # -222, the cause
        for _ in range(ERROR_QUEUE_LENGTH + 10):
            scope.write("BOGus:HEADer")             # -113 each
        assert errors(scope, model) == [-222] + [-113] * (ERROR_QUEUE_LENGTH - 2) + [-350]
        assert errors(scope, model) == []


def threads_serving() -> int:
    return sum(1 for t in threading.enumerate() if "process_request" in t.name)


def test_clients_beyond_the_limit_are_closed_and_get_no_thread():
    with serve("keysight-msox4000", max_connections=3) as srv:
        before = threads_serving()
        held = [socket.create_connection(srv.address, timeout=10) for _ in range(3)]
        for s in held:  # served: each answers
            s.sendall(b"*IDN?\n")
            assert s.recv(4096).startswith(srv.dialect.idn.encode())
        extra = [socket.create_connection(srv.address, timeout=10) for _ in range(20)]
        for s in extra:  # accepted and closed at once, no answer and no thread
            s.sendall(b"*IDN?\n")
            assert s.recv(4096) == b""
        assert threads_serving() - before <= 3 and srv.clients == 3
        held[0].close()
        # the slot is free once the server has seen the close, not when the client made it
        deadline = time.monotonic() + 10
        while srv.clients >= 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert srv.clients == 2
        late = socket.create_connection(srv.address, timeout=10)  # room again
        late.sendall(b"*IDN?\n")
        assert late.recv(4096).startswith(srv.dialect.idn.encode())
        for s in [*held, *extra, late]:
            s.close()


def test_a_silent_client_is_disconnected_after_the_idle_timeout():
    with serve("rigol-mso5000", idle_timeout_s=0.2) as srv, \
            socket.create_connection(srv.address, timeout=20) as s:
        s.sendall(b"*IDN?\n")
        assert s.recv(4096).startswith(srv.dialect.idn.encode())
        assert s.recv(4096) == b""  # then silence: the server ends the connection (a read that returned)


@pytest.mark.skipif(shutil.which("ss") is None, reason="needs ss (iproute2)")
def test_the_listen_backlog_takes_a_burst_of_clients():
    """A backlog of 5 made 47 of 300 rapid connects wait for a SYN retransmission (~1 s)."""
    from nicrig.acquisition.instruments.sim.server import LISTEN_BACKLOG

    with serve("keysight-msox4000") as srv:
        port = srv.address[1]
        listing = subprocess.run(["ss", "-Hltn", f"sport = :{port}"], capture_output=True, text=True, check=True)
        send_q = int(listing.stdout.split()[2])  # a listening socket's Send-Q is its backlog
        assert send_q == LISTEN_BACKLOG >= 128
