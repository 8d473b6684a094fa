"""``nicrig events`` in its users' notation: hex where sigrok, PulseView and Wireshark show hex, ``--where``
in hex or decimal and names in any case, JSON booleans, and a line on stderr with exit status 1 when no row
matched. The tables are built by the decoders' own record-to-table code from records a decoder would write."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from nicrig.acquisition.capture import CaptureSet, SourceSpec
from nicrig.decoders import notation
from nicrig.decoders.tables import SCHEMAS, records_to_table

PCI_RECORDS = [
    {"ss": 10, "es": 14, "command": "Memory Write", "command_code": 7, "address": 0xfd000004, "dac": False,
     "data_phases": 1, "bytes": 4, "termination": "normal", "kind": "csr", "wide": False, "stop": False},
    {"ss": 20, "es": 40, "command": "Memory Read Multiple", "command_code": 0xc, "address": 0x1_2345_6780,
     "dac": True, "data_phases": 8, "bytes": 64, "termination": "normal", "kind": "dma", "wide": True,
     "stop": False},
    {"ss": 50, "es": 54, "command": "Memory Read", "command_code": 6, "address": None, "dac": False,
     "data_phases": 1, "bytes": -1, "termination": "master_abort", "kind": "unknown"},
]
ETH_RECORDS = [
    {"ss": 5, "es": 80, "direction": "tx", "length": 64, "dst": "01:80:c2:00:00:01", "src": "00:1b:21:0a:0b:0c",
     "ethertype": 0x8808, "inner_ethertype": 0x8808, "fcs_ok": True, "pause_quanta": 65535, "pause_ns": 33553920.0},
    {"ss": 90, "es": 300, "direction": "rx", "length": 1518, "dst": "00:1b:21:0a:0b:0c",
     "src": "00:1b:21:0d:0e:0f", "ethertype": 0x8100, "inner_ethertype": 0x0800, "vlan": 5, "fcs_ok": False},
]


@pytest.fixture(scope="module")
def capture(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("events") / "cap.h5"
    with CaptureSet.create(path) as cs:
        w = cs.add_source(SourceSpec("send_pci", ["FRAME#"], samplerate_hz=1e9))
        w.append(np.zeros((400, 1), np.uint8))
        cs.write_table("decoded/send_pci/pci", records_to_table("pci", PCI_RECORDS, cs.source("send_pci")))
        w = cs.add_source(SourceSpec("probe", ["RX_DV"], samplerate_hz=1e9))
        w.append(np.zeros((400, 1), np.uint8))
        cs.write_table("decoded/probe/ethernet", records_to_table("ethernet", ETH_RECORDS, cs.source("probe")))
        empty = records_to_table("irq", [], cs.source("send_pci"))
        cs.write_table("decoded/send_pci/irq", empty)
    return path


def events(capture: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "nicrig", "events", str(capture), *args],
                          capture_output=True, text=True, timeout=120)


def test_pci_columns_print_in_hex_as_the_pci_decoder_writes_them(capture):
    r = events(capture, "--source", "send_pci", "--decoder", "pci")
    assert r.returncode == 0 and r.stderr == ""
    rows = list(csv.DictReader(io.StringIO(r.stdout)))
    assert [row["address"] for row in rows] == ["0xfd000004", "0x0000000123456780", ""]
    assert [row["command_code"] for row in rows] == ["0x7", "0xc", "0x6"]
    assert [row["dac"] for row in rows] == ["false", "true", "false"]
    assert [row["bytes"] for row in rows] == ["4", "64", "-1"]        # decimal stays decimal, -1 unknown


def test_json_has_json_booleans_hex_strings_and_null_for_unknown(capture):
    r = events(capture, "--source", "send_pci", "--decoder", "pci", "--json")
    assert r.returncode == 0
    assert "True" not in r.stdout and "False" not in r.stdout
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    assert [(x["address"], x["dac"], x["wide"]) for x in rows] == [
        ("0xfd000004", False, False), ("0x0000000123456780", True, True), (None, False, False)]
    assert rows[0]["data_phases"] == 1 and rows[0]["kind"] == "csr"


def test_ethernet_ethertypes_and_macs_as_wireshark_shows_them(capture):
    rows = [json.loads(x) for x in events(capture, "--source", "probe", "--decoder", "ethernet",
                                          "--json").stdout.splitlines()]
    assert [(x["ethertype"], x["inner_ethertype"]) for x in rows] == [("0x8808", "0x8808"), ("0x8100", "0x0800")]
    assert rows[0]["src"] == "00:1b:21:0a:0b:0c" and rows[1]["fcs_ok"] is False and rows[1]["vlan"] == 5
    assert rows[0]["pause_quanta"] == 65535


@pytest.mark.parametrize("where, seqs", [
    (["address=0xfd000004"], [10]),
    (["address=0xFD000004"], [10]),
    (["address=4244635652"], [10]),
    (["address=0x123456780"], [20]),
    (["address="], [50]),                       # empty: unknown
    (["kind=CSR"], [10]),
    (["kind=dma", "dac=TRUE"], [20]),
    (["command_code=0xc"], [20]),
    (["command_code=12"], [20]),
    (["termination=Master_Abort"], [50]),
])
def test_where_takes_hex_or_decimal_and_names_in_any_case(capture, where, seqs):
    args = [a for w in where for a in ("--where", w)]
    r = events(capture, "--source", "send_pci", "--decoder", "pci", "--json", *args)
    assert r.returncode == 0, r.stderr
    assert [json.loads(x)["ss"] for x in r.stdout.splitlines()] == seqs


def test_where_on_ethertype_and_mac(capture):
    r = events(capture, "--source", "probe", "--decoder", "ethernet", "--where", "ethertype=0x8808",
               "--where", "src=00:1B:21:0A:0B:0C")
    assert r.returncode == 0
    assert [row["direction"] for row in csv.DictReader(io.StringIO(r.stdout))] == ["tx"]


def test_no_match_says_so_on_stderr_and_exits_1(capture):
    r = events(capture, "--source", "send_pci", "--decoder", "pci", "--where", "kind=msi")
    assert r.returncode == 1
    assert r.stdout.splitlines() == [",".join(name for name, _, _ in SCHEMAS["pci"])]   # the header, still
    assert "none of the 3 rows of decoded/send_pci/pci matched kind=msi" in r.stderr
    assert len(r.stderr.splitlines()) == 1
    r = events(capture, "--source", "send_pci", "--decoder", "irq", "--json")
    assert r.returncode == 1 and r.stdout == "" and "decoded/send_pci/irq has no rows" in r.stderr


@pytest.mark.parametrize("where, message", [
    ("address=fd000004", "address holds numbers"),
    ("dac=maybe", "dac is true or false"),
    ("nosuch=1", "use COLUMN=VALUE with a column of ss, es"),
    ("kind", "use COLUMN=VALUE"),
])
def test_bad_where_is_one_clear_line_exit_2(capture, where, message):
    r = events(capture, "--source", "send_pci", "--decoder", "pci", "--where", where)
    assert r.returncode == 2 and message in r.stderr and len(r.stderr.splitlines()) == 1


def test_hex_text_widths():
    assert notation.hex_text(0x8808, 4) == "0x8808"
    assert notation.hex_text(0x800, 4) == "0x0800"
    assert notation.hex_text(0x1_0000_0000, 8) == "0x100000000"     # never truncated
    assert notation.hex_text(-1, 8) is None


def test_help_states_the_exit_status_and_notation():
    r = subprocess.run([sys.executable, "-m", "nicrig", "events", "--help"], capture_output=True, text=True)
    assert "--json" in r.stdout and "--format" not in r.stdout
    assert "1 no row matched" in r.stdout and "hex" in r.stdout
