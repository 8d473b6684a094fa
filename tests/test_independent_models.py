"""Captures from independent Verilog models, through the whole user path.

``tests/hdl/pci_bus_tb.v`` (a PCI 3.0 master and scripted target) and
``tests/hdl/gmii_mac_tb.v`` (an 802.3 GMII transmitter that computes its own FCS)
are simulated with Icarus Verilog; their VCD dumps go through

    nicrig import X.vcd -o cap.h5 [--clock ...]  ->  nicrig decode cap.h5 [-P ...]
    ->  nicrig events cap.h5 --source S --decoder pci|ethernet --json

and every decoded row is compared with the line the testbench logged for what it
did. Nothing here comes from nicrig's own simulator. See docs/independent-models.md.
The same captures hold each native kernel to its PD (``kernel_conformance``).

Run as a script to write the GMII model's frame image for a run by hand:
``python tests/test_independent_models.py frames.hex``.
"""

from __future__ import annotations

import json
import re
import shutil
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest
from kernel_conformance import check_capture

HDL = Path(__file__).resolve().parent / "hdl"
IVERILOG = shutil.which("iverilog")
VVP = shutil.which("vvp")

pytestmark = [
    pytest.mark.sigrok,
    pytest.mark.skipif(not (IVERILOG and VVP),
                       reason="needs Icarus Verilog (iverilog and vvp): apt-get install iverilog"),
    pytest.mark.skipif(shutil.which("sigrok-cli") is None, reason="needs sigrok-cli"),
]

PCI_COMMANDS = {0x0: "Interrupt Acknowledge", 0x1: "Special Cycle", 0x2: "I/O Read", 0x3: "I/O Write", 0x6: "Memory Read", 0x7: "Memory Write",
                0xA: "Configuration Read", 0xB: "Configuration Write", 0xC: "Memory Read Multiple",
                0xE: "Memory Read Line", 0xF: "Memory Write and Invalidate"}
TERMINATIONS = {"normal", "retry", "disconnect_with_data", "disconnect_without_data", "target_abort",
                "master_abort"}


# -- running things ---------------------------------------------------------------------------------
def nicrig(*args: object) -> str:
    r = subprocess.run([sys.executable, "-m", "nicrig", *map(str, args)], capture_output=True, text=True,
                       timeout=120, check=False)
    assert r.returncode == 0, f"nicrig {' '.join(map(str, args))} failed ({r.returncode}):\n{r.stdout}{r.stderr}"
    return r.stdout


def events(h5: Path, source: str, decoder: str) -> list[dict]:
    out = nicrig("events", h5, "--source", source, "--decoder", decoder, "--json")
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def simulate(tb: Path, workdir: Path, params: dict[str, int] | None = None, plusargs: tuple[str, ...] = ()
             ) -> tuple[Path, str]:
    """Compile ``tb`` with iverilog and run it with vvp; returns the VCD and the simulation's stdout."""
    top = tb.stem
    binary = workdir / f"{top}.vvp"
    cmd = [IVERILOG, "-g2005", "-I", str(tb.parent), "-o", str(binary)]  # -I: the shared `include files
    cmd += [f"-P{top}.{k}={v}" for k, v in (params or {}).items()]
    r = subprocess.run(cmd + [str(tb)], capture_output=True, text=True, timeout=60, check=False)
    assert r.returncode == 0, f"iverilog failed:\n{r.stdout}{r.stderr}"
    vcd = workdir / f"{top}.vcd"
    r = subprocess.run([VVP, "-n", str(binary), f"+vcd={vcd}", *plusargs], capture_output=True, text=True,
                       timeout=60, cwd=workdir, check=False)
    assert r.returncode == 0 and "END " in r.stdout, f"vvp failed:\n{r.stdout}{r.stderr}"
    return vcd, r.stdout


def log_lines(text: str, tag: str) -> list[dict[str, str]]:
    """``TAG k=v k=v ...`` lines of a simulation log as dicts."""
    return [dict(kv.split("=", 1) for kv in line.split()[1:]) for line in text.splitlines()
            if line.startswith(tag + " ")]


# -- PCI ------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module", params=[2, 0, 11], ids=lambda t: f"tval{t}ns")
def pci_sim(request, tmp_path_factory):
    """The PCI testbench with outputs changing TVAL ns after CLK rises (0: zero-delay RTL style)."""
    work = tmp_path_factory.mktemp(f"pci_tval{request.param}")
    vcd, out = simulate(HDL / "pci_bus_tb.v", work, {"TVAL": request.param})
    return work, vcd, log_lines(out, "TXN"), log_lines(out, "TGT")


def expected_pci(txn: dict[str, str]) -> dict:
    # events prints C/BE# and addresses in hex as sigrok's decoder does (16 digits after a dual address cycle)
    return {"command_code": f"0x{int(txn['cmd']):x}", "command": PCI_COMMANDS[int(txn["cmd"])],
            "address": f"0x{int(txn['addr'], 16):0{16 if txn['dac'] == '1' else 8}x}", "dac": txn["dac"] == "1", "data_phases": int(txn["phases"]),
            "bytes": int(txn["bytes"]), "termination": txn["term"], "devsel": txn["devsel"],
            "wide": txn["wide"] == "1", "stop": txn["stop"] == "1", "parity_error": 0}


def compare_pci(rows: list[dict], txns: list[dict], time_tolerance_ns: int) -> None:
    assert len(rows) == len(txns), f"decoded {len(rows)} transactions, the testbench did {len(txns)}"
    for row, txn in zip(rows, txns):
        want = expected_pci(txn)
        got = {k: row[k] for k in want}
        assert got == want, f"transaction {txn['i']} at {txn['t_ns']} ns"
        assert abs(row["t_ns"] - int(txn["t_ns"])) <= time_tolerance_ns, (txn, row["t_ns"])


def test_pci_testbench_covers_the_script(pci_sim):
    """The master's view agrees with the target's, and the script covers what it should."""
    _, _, txns, tgts = pci_sim
    assert len(txns) == 26
    seen = {t["i"]: t for t in tgts}
    for t in txns:
        if t["devsel"] == "none":
            assert t["i"] not in seen
        else:
            assert (seen[t["i"]]["cmd"], seen[t["i"]]["addr"], seen[t["i"]]["phases"]) == \
                   (t["cmd"], t["addr"], t["phases"])
    assert {t["term"] for t in txns} == TERMINATIONS
    assert {t["devsel"] for t in txns} == {"fast", "medium", "slow", "subtractive", "none"}
    assert {int(t["cmd"]) for t in txns} == set(PCI_COMMANDS)
    assert any(t["dac"] == "1" for t in txns) and any(t["wide"] == "1" for t in txns)


def test_pci_state_mode(pci_sim):
    """--clock CLK (one sample per rising edge), roles guessed from the names, decoders chosen automatically."""
    work, vcd, txns, _ = pci_sim
    h5 = work / "state.h5"
    out = nicrig("import", vcd, "-o", h5, "--clock", "CLK", "--source", "pci")
    assert "state mode" in out and "bus pci" in out
    assert "decoded/pci/pci: 26 rows" in nicrig("decode", h5)
    compare_pci(events(h5, "pci", "pci"), txns, 0)
    assert check_capture(h5, "pci", outputs=["pci"])  # the kernel is the PD, record for record


def test_pci_timing_mode(pci_sim):
    """No --clock: every change sampled (rate from the change times), CLK as the decoder's clk channel."""
    work, vcd, txns, _ = pci_sim
    h5 = work / "timing.h5"
    out = nicrig("import", vcd, "-o", h5, "--source", "pci")
    assert "timing mode" in out and "clk=CLK" in out
    nicrig("decode", h5)
    compare_pci(events(h5, "pci", "pci"), txns, 0)
    assert check_capture(h5, "pci", outputs=["pci"])


def test_pci_timing_mode_coarse_with_explicit_map(pci_sim):
    """A 100 MHz logic analyzer (3 samples a clock), channels mapped by hand with -P, PAR64 included."""
    work, vcd, txns, _ = pci_sim
    h5 = work / "coarse.h5"
    nicrig("import", vcd, "-o", h5, "--source", "pci", "--sample-rate", "100MHz")
    stack = ("pci:clk=CLK:frame=FRAME_N:irdy=IRDY_N:trdy=TRDY_N:devsel=DEVSEL_N:stop=STOP_N:ad=AD:cbe=CBE_N"
             ":par=PAR:par64=PAR64:req64=REQ64_N:ack64=ACK64_N:clock=clk")
    nicrig("decode", h5, "--source", "pci", "-P", stack)
    compare_pci(events(h5, "pci", "pci"), txns, 10)   # the edge is seen on the next 10 ns sample
    assert check_capture(h5, "pci", stacks=[stack])



# -- a NIC sharing the bus: phases against the testbench's own log ----------------------------------------
#: The NIC's BAR in pci_nic_tb.v; its REQ#/GNT# are the probed REQ_N/GNT_N, INTA# is INTA_N.
NIC_STACK = ("pci:frame=FRAME_N:irdy=IRDY_N:trdy=TRDY_N:devsel=DEVSEL_N:stop=STOP_N:ad=AD:cbe=CBE_N:par=PAR"
             ":req=REQ_N:gnt=GNT_N:bars=0xfd000000+0x20000:clock=state")
#: The analysis's name for each of the testbench's phases.
NIC_ROLES = {"send": "send", "service": "interrupt", "update": "update"}
NIC_TRANSFERS = ("fetch", "receive", "writeback")
TB_PERIOD_NS = 30


def truth_cycles(path: Path) -> tuple[dict[str, list[tuple[int, int]]], list[tuple[int, str, str]]]:
    """The testbench's log: per phase instance (``send:3``) its span in ns, from its first clock to the end of its
    last; and every clock as (t_ns, phase, granted agent)."""
    clocks = [(int(t), p, g) for t, p, g in (line.split() for line in path.read_text().splitlines())]
    spans: dict[str, list[int]] = {}
    for t, phase, _ in clocks:
        if ":" in phase:
            spans.setdefault(phase, [t, t])[1] = t
    by_kind: dict[str, list[tuple[int, int]]] = {}
    for name, (a, b) in sorted(spans.items(), key=lambda kv: kv[1][0]):
        by_kind.setdefault(name.split(":")[0], []).append((a, b + TB_PERIOD_NS))
    return by_kind, clocks


@pytest.fixture(scope="module", params=[2, 0, 11], ids=lambda t: f"tval{t}ns")
def nic_capture(request, tmp_path_factory):
    """pci_nic_tb.v simulated (outputs TVAL ns after CLK rises), imported (state mode) and decoded with the NIC's
    GNT#, BAR and INTA#."""
    work = tmp_path_factory.mktemp(f"pci_nic_tval{request.param}")
    cycles = work / "cycles.txt"
    vcd, out = simulate(HDL / "pci_nic_tb.v", work, {"TVAL": request.param}, plusargs=(f"+cycles={cycles}",))
    h5 = work / "nic.h5"
    nicrig("import", vcd, "-o", h5, "--clock", "CLK", "--source", "pci")
    nicrig("decode", h5, "--source", "pci", "-P", NIC_STACK, "-P", "irq:irq=INTA_N:polarity=active-low")
    end = log_lines(out, "END")[0]
    return h5, truth_cycles(cycles), end


def test_nic_testbench_covers_what_it_should(nic_capture):
    """Arbitration, parking, a second master, interrupts, retries and disconnects are all in the capture."""
    h5, (spans, clocks), end = nic_capture
    from nicrig.acquisition.capture import CaptureSet
    with CaptureSet.open(h5) as cs:
        pci = cs.read_table("decoded/pci/pci")
    assert int(end["sends"]) == len(spans["send"]) == 11 and int(end["interrupts"]) == len(spans["service"]) >= 11
    assert any(p == "idle" and g == "hb" for _, p, g in clocks)            # the bus parked on the host bridge
    assert {g for _, p, g in clocks if p == "other"} >= {"dsk"}
    assert {g for *_, g in clocks} >= {"hb", "nic", "dsk", "-"}
    # every transaction of the log decoded, the second master's as another agent's
    runs = [p for k, (_, p, _) in enumerate(clocks) if p != "idle" and (k == 0 or clocks[k - 1][1] != p)]
    assert len(pci) == len(runs)
    assert (pci["kind"] == b"unknown").sum() == runs.count("other") > 50
    assert set(pci["termination"].tolist()) >= {b"normal", b"retry", b"disconnect_with_data"}
    assert (pci["parity_error"] == 0).all()
    assert check_capture(h5, "pci", stacks=[NIC_STACK])                  # the kernel is the PD here too


def test_nic_phases_equal_the_testbench_log(nic_capture):
    """nicrig's phase analysis of the capture against the testbench's log: every CSR sequence and DMA transfer
    found, starting where the log says and lasting as long within 1 %; the statistics say how many of them."""
    from nicrig.acquisition.capture import CaptureSet
    from nicrig.analysis import bus

    h5, (spans, _), end = nic_capture
    with CaptureSet.open(h5) as cs:
        pci, irq = cs.read_table("decoded/pci/pci"), cs.read_table("decoded/pci/irq")
    assert len(irq) == int(end["interrupts"])
    activity = bus.bus_activity(pci, irq)
    for phase, role in NIC_ROLES.items():
        found = activity.clusters_of_role(role)
        want = spans[phase]
        assert [round(c.start_ns) for c in found] == [a for a, _ in want], phase
        for c, (a, b) in zip(found, want):
            assert c.duration_ns == pytest.approx(b - a, rel=0.01), f"{phase} at {a} ns"
    assert not activity.clusters_of_role("other")
    for role in NIC_TRANSFERS:
        found = activity.of_role(role)
        assert [(round(t.start_ns), round(t.end_ns)) for t in found] == spans[role], role
    # each service is the one its interrupt asked for: INTA# rose during its first access
    assert [it.service_cluster >= 0 for it in activity.interrupts] == [True] * len(irq)
    csr, dma = bus.csr_timing(activity), bus.dma_timing(activity, pci)
    for stat, phase in ((csr.send_setup_us, "send"), (csr.service_us, "service"), (csr.update_us, "update"),
                        (dma.fetch_us, "fetch"), (dma.receive_us, "receive")):
        durations = [(b - a) / 1000 for a, b in spans[phase]]
        assert stat.count == len(durations), phase
        assert stat.median == pytest.approx(float(np.median(durations)), rel=0.01), phase


# -- Ethernet / GMII ----------------------------------------------------------------------------------
NRG_MAGIC = 0x4E524731
MAC_A, MAC_B = "02:00:00:00:00:01", "02:00:00:00:00:02"


def nicrig_header(kind: int, seq: int, test_id: int, flags: int = 0) -> bytes:
    return struct.pack("!IHHII", NRG_MAGIC, kind, flags, seq, test_id)


def gmii_frames() -> list[dict]:
    """The frames the MAC model sends: Scapy packets without FCS, and how to send them."""
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Dot1Q, Ether
    from scapy.packet import Raw

    def udp(seq: int, kind: int, extra: bytes, vlan: int | None = None):
        eth = Ether(dst=MAC_B, src=MAC_A)
        if vlan is not None:
            eth = eth / Dot1Q(vlan=vlan, prio=3)
        return eth / IP(src="10.0.0.1", dst="10.0.0.2", id=seq) / UDP(sport=40000 + seq, dport=5001) / \
            Raw(nicrig_header(kind, seq, 0x7E57) + extra)

    pause = Ether(dst="01:80:c2:00:00:01", src=MAC_A, type=0x8808) / Raw(struct.pack("!HH", 0x0001, 0x1234))
    return [
        {"pkt": udp(5, 1, b"stream payload"), "ifg": 20},
        {"pkt": pause, "ifg": 12, "pause": 0x1234},
        {"pkt": udp(6, 2, bytes(range(40)), vlan=100), "ifg": 12},
        {"pkt": udp(7, 3, b"bad fcs"), "ifg": 15, "bad_fcs": True},
        {"pkt": udp(8, 1, b"x" * 30), "ifg": 12, "er_octet": 45},
        {"pkt": udp(9, 1, bytes(i & 0xFF for i in range(1000))), "ifg": 30},
        {"pkt": Ether(dst="ff:ff:ff:ff:ff:ff", src=MAC_A, type=0x88B5) / Raw(b"\x01"), "ifg": 5},  # MAC: 12
    ]


def write_frame_image(path: Path, frames: list[dict]) -> None:
    """The memory image gmii_mac_tb.v reads ($readmemh, one octet a line)."""
    out = bytearray()
    for f in frames:
        body = bytes(f["pkt"])
        flags = (1 if f.get("bad_fcs") else 0) | (2 if "er_octet" in f else 0)
        out += struct.pack("!HBHB", len(body), flags, f.get("er_octet", 0), f["ifg"]) + body
    out += b"\x00\x00"
    path.write_text("".join(f"{b:02x}\n" for b in out))


@pytest.fixture(scope="module")
def gmii_sim(tmp_path_factory):
    work = tmp_path_factory.mktemp("gmii")
    frames = gmii_frames()
    write_frame_image(work / "frames.hex", frames)
    vcd, out = simulate(HDL / "gmii_mac_tb.v", work, plusargs=(f"+frames={work / 'frames.hex'}",))
    return work, vcd, frames, log_lines(out, "FRAME")


def test_gmii_mac_fcs_and_framing(gmii_sim):
    """The Verilog MAC's padding and CRC-32 agree with an independent one (zlib)."""
    _, _, frames, log = gmii_sim
    assert len(log) == len(frames)
    for f, line in zip(frames, log):
        body = bytes(f["pkt"]).ljust(60, b"\0")
        fcs = struct.pack("<I", zlib.crc32(body)).hex()
        assert int(line["len"]) == len(body) + 4
        assert (line["fcs"] == fcs) != bool(f.get("bad_fcs")), line
        assert int(line["ifg"]) == max(12, f["ifg"])


def test_gmii_state_mode(gmii_sim):
    work, vcd, frames, log = gmii_sim
    h5 = work / "gmii.h5"
    out = nicrig("import", vcd, "-o", h5, "--clock", "GTX_CLK", "--source", "mac")
    assert "bus gmii" in out
    assert check_capture(h5, "mac", outputs=["ethernet"])
    nicrig("decode", h5)
    rows = events(h5, "mac", "ethernet")
    assert len(rows) == len(frames)
    for f, line, row in zip(frames, log, rows):
        pkt = f["pkt"]
        tagged = pkt.haslayer("Dot1Q")
        inner = pkt["Dot1Q"].type if tagged else pkt.type
        want = {
            "t_ns": int(line["t_ns"]), "direction": "tx", "length": int(line["len"]),
            "dst": pkt.dst, "src": pkt.src, "ethertype": f"0x{pkt.type:04x}",
            "inner_ethertype": f"0x{inner:04x}",
            "vlan": pkt["Dot1Q"].vlan if tagged else -1,
            "fcs_ok": not f.get("bad_fcs"),            # TX_ER does not touch TXD: the FCS still checks
            "error_octets": 1 if "er_octet" in f else 0,
            "pause_quanta": f.get("pause", -1),
            "pause_ns": f["pause"] * 512 if "pause" in f else -1,
            "ip_src": pkt["IP"].src if pkt.haslayer("IP") else "",
            "ip_dst": pkt["IP"].dst if pkt.haslayer("IP") else "",
            "udp_sport": pkt["UDP"].sport if pkt.haslayer("UDP") else -1,
            "udp_dport": pkt["UDP"].dport if pkt.haslayer("UDP") else -1,
        }
        if pkt.haslayer("UDP"):
            magic, kind, _, seq, _ = struct.unpack("!IHHII", bytes(pkt["UDP"].payload)[:16])
            assert magic == NRG_MAGIC
            want |= {"nicrig_kind": kind, "seq": seq}
        else:
            want |= {"nicrig_kind": -1, "seq": -1}
        assert {k: row[k] for k in want} == want, f"frame {line['i']}"


def test_gmii_timing_mode(gmii_sim):
    """No --clock: a 1 GHz timing capture; GTX_CLK is guessed as the clock and given to gmii as clk."""
    work, vcd, frames, log = gmii_sim
    h5 = work / "gmii_timing.h5"
    out = nicrig("import", vcd, "-o", h5, "--source", "mac")
    assert "timing mode" in out and "tx_clk=GTX_CLK" in out
    assert check_capture(h5, "mac", outputs=["ethernet"])
    nicrig("decode", h5)
    rows = events(h5, "mac", "ethernet")
    assert [r["length"] for r in rows] == [int(x["len"]) for x in log]
    assert [r["fcs_ok"] for r in rows] == [not f.get("bad_fcs") for f in frames]
    assert [r["seq"] for r in rows] == [5, -1, 6, 7, 8, 9, -1]
    assert [r["t_ns"] for r in rows] == [int(x["t_ns"]) for x in log]


if __name__ == "__main__":
    if len(sys.argv) != 2 or not re.search(r"\.hex$", sys.argv[1]):
        sys.exit("usage: python tests/test_independent_models.py FRAMES.hex")
    write_frame_image(Path(sys.argv[1]), gmii_frames())
