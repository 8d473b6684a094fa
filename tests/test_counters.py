"""Host counters: parsers on sample texts, a whole fake host, this machine, and two namespace hosts."""

from __future__ import annotations

import json
import socket
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from netns import two_hosts  # noqa: F401
from nicrig.udpmon import counters as c

# --- sample texts (as a 4-CPU host with an ixgbe NIC on eth2 would show them) ---------------

PROC_STAT = """\
cpu  5000 15 2100 31500 250 50 85 10 0 0
cpu0 1000 10 500 8000 100 20 30 5 0 0
cpu1 2000 0 700 7000 50 10 20 5 0 0
cpu2 1500 5 600 7500 80 15 25 0 0 0
cpu3 500 0 300 9000 20 5 10 0 0 0
intr 1462898 44 9 0 0 0 0 0 0 1 0
ctxt 1990473
btime 1700000000
processes 2915
procs_running 1
procs_blocked 0
softirq 183433 0 21755 12 39 0 0 0 0 0 0
"""

PROC_STAT_AFTER = PROC_STAT.replace("cpu0 1000 10 500 8000 100 20 30 5", "cpu0 1060 10 520 8010 100 25 35 5") \
    .replace("cpu  5000 15 2100 31500 250 50 85 10", "cpu  5060 15 2120 31510 250 55 90 10") \
    .replace("intr 1462898", "intr 1463898").replace("ctxt 1990473", "ctxt 1990573")

INTERRUPTS = """\
            CPU0       CPU1       CPU2       CPU3       
   0:         44          0          0          0   IO-APIC   2-edge      timer
   8:          0          0          0 4294967290   IO-APIC   8-edge      rtc0
  64:          0          0          0          0  IR-PCI-MSI 1048576-edge      eth2
  65:     123456          0          0          0  IR-PCI-MSI 1048577-edge      eth2-TxRx-0
  66:          0     654321          0          0  IR-PCI-MSI 1048578-edge      eth2-TxRx-1
  67:          7          0          0          0  IR-PCI-MSI 1048579-edge      eth20-TxRx-0
  90:          0          0       1000          0  IR-PCI-MSI 524288-edge      mlx5_comp0@pci:0000:03:00.0
 NMI:         12         13         14         15   Non-maskable interrupts
 LOC:    1000000    2000000    3000000    4000000   Local timer interrupts
 ERR:          0
 MIS:          3
"""

INTERRUPTS_AFTER = INTERRUPTS.replace("123456          0", "123556          0") \
    .replace("0     654321", "0     654371").replace("4000000   Local", "4000500   Local") \
    .replace("0 4294967290   IO-APIC", "0          5   IO-APIC")

SOFTIRQS = """\
                    CPU0       CPU1       CPU2       CPU3       
          HI:          1          0          0          0
       TIMER:     112866      87386       1000       2000
      NET_TX:          4          0          7          9
      NET_RX:       1687       1825         10         20
       BLOCK:      40000      30000          0          0
"""

SOFTIRQS_AFTER = SOFTIRQS.replace("1687       1825", "1787       1845")

SNMP = """\
Ip: Forwarding DefaultTTL InReceives InHdrErrors InAddrErrors ForwDatagrams InUnknownProtos InDiscards InDelivers OutRequests OutDiscards OutNoRoutes ReasmTimeout ReasmReqds ReasmOKs ReasmFails FragOKs FragFails FragCreates OutTransmits
Ip: 2 64 2894 0 0 0 0 0 2894 2031 0 0 0 0 0 0 0 0 0 2031
Icmp: InMsgs InErrors InCsumErrors InDestUnreachs InTimeExcds
Icmp: 1 0 0 1 0
Tcp: RtoAlgorithm RtoMin RtoMax MaxConn ActiveOpens PassiveOpens AttemptFails EstabResets CurrEstab InSegs OutSegs RetransSegs InErrs OutRsts InCsumErrors
Tcp: 1 200 120000 -1 38 2 0 0 0 2817 1955 0 0 52 0
Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors IgnoredMulti MemErrors
Udp: 1000 5 2 900 1 0 0 0 0
UdpLite: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors IgnoredMulti MemErrors
UdpLite: 0 0 0 0 0 0 0 0 0
"""

SNMP_AFTER = SNMP.replace("Udp: 1000 5 2 900 1 0", "Udp: 1950 5 52 900 51 0")

NET_DEV = """\
Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo:    3193      29    0    0    0     0          0         0     3193      29    0    0    0     0       0          0
  eth2:1234567890123 987654321    1    2    3     4          0        17 555 6    0    0    0     0       0          0
"""

NET_DEV_AFTER = NET_DEV.replace("1234567890123 987654321    1    2", "1234569390123 987655321    1   52")

SOFTNET = """\
fffffff0 00000000 00000001 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000
00000b50 00000002 0000000a 00000000 00000000 00000000 00000000 00000000 00000000 00000004 00000000 00000003 00000002 00000001 00000002
"""

SOFTNET_AFTER = """\
00000010 00000000 00000001 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000
00000c50 00000005 0000000b 00000000 00000000 00000000 00000000 00000000 00000000 00000004 00000000 00000000 00000002 00000000 00000000
"""

SOFTNET_OLD = """\
0000a000 00000001 00000002 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000
0000b000 00000000 00000003 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000
"""

ETHTOOL_S = """\
NIC statistics:
     rx_packets: 1234567
     tx_packets: 7654321
     rx_bytes: 1851850500
     tx_bytes: 11481481500
     rx_missed_errors: 12
     tx_restart_queue: 3
     lxon_rx_count: 0
     lxoff_rx_count: 7
     lxon_tx_count: 2
     lxoff_tx_count: 5
     tx_queue_0_packets: 3827160
     rx_queue_0_bytes: 925925250
"""

ETHTOOL_S_AFTER = ETHTOOL_S.replace("lxoff_rx_count: 7", "lxoff_rx_count: 19").replace(
    "rx_missed_errors: 12", "rx_missed_errors: 40")

ETHTOOL_A = """\
Pause parameters for eth2:
Autonegotiate:\ton
RX:\t\ton
TX:\t\toff
RX negotiated: on
TX negotiated: off
Statistics:
  tx_pause_frames: 12
  rx_pause_frames: 34
"""

ETHTOOL_C = """\
Coalesce parameters for eth2:
Adaptive RX: on  TX: n/a
stats-block-usecs: n/a
sample-interval: n/a
pkt-rate-low: n/a
pkt-rate-high: n/a

rx-usecs: 50
rx-frames: n/a
rx-usecs-irq: n/a
rx-frames-irq: n/a

tx-usecs: 0
tx-frames: n/a
tx-usecs-irq: n/a
tx-frames-irq: 256

CQE mode RX: n/a  TX: n/a

"""

ETHTOOL_I = """\
driver: ixgbe
version: 6.1.0-18-amd64
firmware-version: 0x61bd0001
expansion-rom-version: 
bus-info: 0000:01:00.0
supports-statistics: yes
"""

LSPCI_PCIE = """\
01:00.0 Ethernet controller: Intel Corporation 82599ES 10-Gigabit SFI/SFP+ Network Connection (rev 01)
\tSubsystem: Intel Corporation Ethernet Server Adapter X520-2
\tControl: I/O+ Mem+ BusMaster+ SpecCycle- MemWINV- VGASnoop- ParErr- Stepping- SERR- FastB2B- DisINTx+
\tStatus: Cap+ 66MHz- UDF- FastB2B- ParErr- DEVSEL=fast >TAbort- <TAbort- <MAbort- >SERR- <PERR- INTx-
\tLatency: 0, Cache Line Size: 64 bytes
\tCapabilities: [40] Power Management version 3
\t\tFlags: PMEClk- DSI+ D1- D2- AuxCurrent=0mA PME(D0+,D1-,D2-,D3hot+,D3cold-)
\tCapabilities: [a0] Express (v2) Endpoint, MSI 00
\t\tDevCap:\tMaxPayload 512 bytes, PhantFunc 0, Latency L0s <512ns, L1 <64us
\t\t\tExtTag- AttnBtn- AttnInd- PwrInd- RBE+ FLReset+ SlotPowerLimit 0.000W
\t\tDevCtl:\tCorrErr+ NonFatalErr+ FatalErr+ UnsupReq+
\t\t\tRlxdOrd- ExtTag- PhantFunc- AuxPwr- NoSnoop+ FLReset-
\t\t\tMaxPayload 256 bytes, MaxReadReq 512 bytes
\t\tDevSta:\tCorrErr- NonFatalErr- FatalErr- UnsupReq- AuxPwr- TransPend-
\t\tLnkCap:\tPort #0, Speed 5GT/s, Width x8, ASPM L0s, Exit Latency L0s <1us
\t\tLnkCtl:\tASPM Disabled; RCB 64 bytes, Disabled- CommClk+
\t\tLnkSta:\tSpeed 5GT/s (ok), Width x4 (downgraded)
\tKernel driver in use: ixgbe
\tKernel modules: ixgbe
"""

LSPCI_PCIX = """\
02:01.0 Ethernet controller: Intel Corporation 82545GM Gigabit Ethernet Controller (rev 04)
\tSubsystem: Intel Corporation PRO/1000 MT Server Adapter
\tStatus: Cap+ 66MHz+ UDF- FastB2B- ParErr- DEVSEL=medium >TAbort- <TAbort- <MAbort- >SERR- <PERR- INTx-
\tLatency: 64 (63750ns min), Cache Line Size: 64 bytes
\tCapabilities: [e4] PCI-X non-bridge device
\t\tCommand: DPERE- ERO+ RBC=512 OST=1
\t\tStatus: Dev=02:01.0 64bit+ 133MHz+ SCD- USC- DC=simple DMMRBC=2048 DMOST=1 DMCRS=8 RSCEM- 266MHz- 533MHz-
\tKernel driver in use: e1000
"""


# --- parsers ----------------------------------------------------------------------------------

def test_parse_proc_stat():
    p = c.parse_proc_stat(PROC_STAT)
    assert list(p["cpus"]) == ["cpu", "cpu0", "cpu1", "cpu2", "cpu3"]
    assert p["cpus"]["cpu1"] == {"user": 2000, "nice": 0, "system": 700, "idle": 7000, "iowait": 50, "irq": 10,
                                 "softirq": 20, "steal": 5, "guest": 0, "guest_nice": 0}
    assert p["cpus"]["cpu"]["idle"] == 31500
    assert (p["intr_total"], p["ctxt"]) == (1462898, 1990473)
    with pytest.raises(ValueError):
        c.parse_proc_stat("intr 5\n")


def test_parse_interrupts_and_select():
    p = c.parse_interrupts(INTERRUPTS)
    assert p["cpus"] == ["CPU0", "CPU1", "CPU2", "CPU3"]
    assert p["lines"]["65"] == {"counts": [123456, 0, 0, 0], "total": 123456,
                                "desc": "IR-PCI-MSI 1048577-edge eth2-TxRx-0"}
    assert p["lines"]["LOC"]["total"] == 10_000_000 and p["lines"]["LOC"]["desc"] == "Local timer interrupts"
    assert p["lines"]["MIS"] == {"counts": [3], "total": 3, "desc": ""}
    assert c.select_interrupts(p, ["eth2"], []) == ["64", "65", "66"]  # not eth20
    assert c.select_interrupts(p, ["eth9", "0000:03:00.0"], ["8"]) == ["8", "90"]
    assert c.select_interrupts(p, ["lo"], []) == []  # not "Local timer"


def test_parse_softirqs():
    p = c.parse_softirqs(SOFTIRQS)
    assert p["NET_RX"] == [1687, 1825, 10, 20] and p["NET_TX"] == [4, 0, 7, 9]
    assert p["cpus"] == ["CPU0", "CPU1", "CPU2", "CPU3"]


def test_parse_snmp():
    p = c.parse_snmp(SNMP)
    assert p["Udp"] == {"InDatagrams": 1000, "NoPorts": 5, "InErrors": 2, "OutDatagrams": 900, "RcvbufErrors": 1,
                        "SndbufErrors": 0, "InCsumErrors": 0, "IgnoredMulti": 0, "MemErrors": 0}
    assert p["Tcp"]["MaxConn"] == -1 and p["Icmp"]["InDestUnreachs"] == 1
    with pytest.raises(ValueError):
        c.parse_snmp("Udp: InDatagrams NoPorts\nUdp: 1\n")


def test_parse_net_dev():
    p = c.parse_net_dev(NET_DEV)
    assert set(p) == {"lo", "eth2"}
    assert p["eth2"] == {"rx_bytes": 1234567890123, "rx_packets": 987654321, "rx_errs": 1, "rx_drop": 2,
                         "rx_fifo": 3, "rx_frame": 4, "rx_compressed": 0, "rx_multicast": 17, "tx_bytes": 555,
                         "tx_packets": 6, "tx_errs": 0, "tx_drop": 0, "tx_fifo": 0, "tx_colls": 0,
                         "tx_carrier": 0, "tx_compressed": 0}


def test_parse_softnet_stat():
    new = c.parse_softnet_stat(SOFTNET)
    assert new[0] == {"processed": 0xFFFFFFF0, "dropped": 0, "time_squeeze": 1, "received_rps": 0,
                      "flow_limit_count": 0, "backlog_len": 0, "cpu": 0, "input_qlen": 0, "process_qlen": 0}
    assert new[1]["cpu"] == 2 and new[1]["processed"] == 0xB50 and new[1]["dropped"] == 2
    assert new[1]["time_squeeze"] == 10 and new[1]["received_rps"] == 4 and new[1]["backlog_len"] == 3
    old = c.parse_softnet_stat(SOFTNET_OLD)
    assert old == [{"processed": 0xA000, "dropped": 1, "time_squeeze": 2, "received_rps": 0, "flow_limit_count": 0,
                    "cpu": 0},
                   {"processed": 0xB000, "dropped": 0, "time_squeeze": 3, "received_rps": 0, "flow_limit_count": 0,
                    "cpu": 1}]


def test_parse_ethtool_statistics_and_pause_counters():
    s = c.parse_ethtool_statistics(ETHTOOL_S)
    assert len(s) == 12 and s["tx_bytes"] == 11481481500 and s["rx_missed_errors"] == 12
    assert c.pause_counters(s) == {"lxon_rx_count": 0, "lxoff_rx_count": 7, "lxon_tx_count": 2, "lxoff_tx_count": 5}
    others = {"rx_flow_control_xon": 1, "tx_flow_control_xoff": 2, "rx_pause_ctrl_phy": 3, "tx_pause_frames": 4,
              "rx_fcs_errors": 5, "rx_packets": 6}
    assert set(c.pause_counters(others)) == {"rx_flow_control_xon", "tx_flow_control_xoff", "rx_pause_ctrl_phy",
                                             "tx_pause_frames"}


def test_parse_ethtool_pause():
    assert c.parse_ethtool_pause(ETHTOOL_A) == {
        "autonegotiate": True, "rx": True, "tx": False, "rx-negotiated": True, "tx-negotiated": False,
        "statistics": {"tx_pause_frames": 12, "rx_pause_frames": 34}}
    plain = ETHTOOL_A.split("Statistics:")[0]
    assert "statistics" not in c.parse_ethtool_pause(plain)


def test_parse_ethtool_coalesce():
    p = c.parse_ethtool_coalesce(ETHTOOL_C)
    assert p["adaptive-rx"] is True and p["adaptive-tx"] is None
    assert p["rx-usecs"] == 50 and p["tx-usecs"] == 0 and p["tx-frames-irq"] == 256 and p["rx-frames"] is None
    assert "cqe-mode-rx" in p and p["cqe-mode-tx"] is None
    assert len(p) == 16


def test_parse_ethtool_driver():
    p = c.parse_ethtool_driver(ETHTOOL_I)
    assert p["driver"] == "ixgbe" and p["bus-info"] == "0000:01:00.0" and p["expansion-rom-version"] == ""


def test_parse_lspci_pcie():
    p = c.parse_lspci(LSPCI_PCIE)
    assert p["description"].startswith("Ethernet controller: Intel Corporation 82599ES")
    assert p["express"] is True and p["pcix"] is False and p["pci_66mhz_capable"] is False
    assert (p["max_payload_supported_bytes"], p["max_payload_bytes"], p["max_read_request_bytes"]) == (512, 256, 512)
    assert (p["link_capability"]["speed"], p["link_capability"]["width"]) == ("5GT/s", 8)
    assert (p["link_status"]["speed"], p["link_status"]["width"]) == ("5GT/s", 4)
    assert "downgraded" in p["link_status"]["raw"]
    assert p["kernel_driver"] == "ixgbe"


def test_parse_lspci_pcix_and_denied():
    p = c.parse_lspci(LSPCI_PCIX)
    assert p["pcix"] is True and p["express"] is False and p["pci_66mhz_capable"] is True
    assert (p["pcix_max_read_byte_count"], p["pcix_designed_max_read_byte_count"], p["pcix_133mhz"]) == \
        (512, 2048, True)
    assert "max_payload_bytes" not in p
    denied = c.parse_lspci("01:00.0 Ethernet controller: X\n\tCapabilities: <access denied>\n")
    assert c.is_unavailable(denied["capabilities"]) and "express" not in denied


# --- a whole fake host ----------------------------------------------------------------------------

def _script(path: Path, body: str) -> str:
    path.write_text("#!/bin/sh\n" + textwrap.dedent(body))
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def _write_proc(proc: Path, after: bool = False) -> None:
    (proc / "net").mkdir(parents=True, exist_ok=True)
    texts = {"stat": (PROC_STAT, PROC_STAT_AFTER), "interrupts": (INTERRUPTS, INTERRUPTS_AFTER),
             "softirqs": (SOFTIRQS, SOFTIRQS_AFTER), "net/snmp": (SNMP, SNMP_AFTER),
             "net/dev": (NET_DEV, NET_DEV_AFTER), "net/softnet_stat": (SOFTNET, SOFTNET_AFTER)}
    for name, (b, a) in texts.items():
        (proc / name).write_text(a if after else b)


@pytest.fixture
def fake_host(tmp_path):
    proc, sysfs, data = tmp_path / "proc", tmp_path / "sys", tmp_path / "data"
    _write_proc(proc)
    data.mkdir()
    for name, text in {"S": ETHTOOL_S, "a": ETHTOOL_A, "c": ETHTOOL_C, "i": ETHTOOL_I, "lspci": LSPCI_PCIE}.items():
        (data / name).write_text(text)
    function = sysfs / "devices" / "pci0000:00" / "0000:00:1c.0" / "0000:01:00.0"
    (function / "msi_irqs").mkdir(parents=True)
    for irq in ("64", "65", "66"):
        (function / "msi_irqs" / irq).write_text("msix\n")
    for name, value in {"vendor": "0x8086", "device": "0x10fb", "numa_node": "0", "current_link_speed":
                        "5.0 GT/s PCIe", "current_link_width": "4", "max_link_speed": "5.0 GT/s PCIe",
                        "max_link_width": "8"}.items():
        (function / name).write_text(value + "\n")
    driver = sysfs / "bus" / "pci" / "drivers" / "ixgbe"
    driver.mkdir(parents=True)
    (function / "driver").symlink_to(driver)
    net = sysfs / "class" / "net" / "eth2"
    net.mkdir(parents=True)
    (net / "device").symlink_to(function)
    (net / "mtu").write_text("9000\n")
    ethtool = _script(tmp_path / "ethtool", f"""\
        case "$*" in
          "-S eth2") cat {data}/S;;
          "-I -a eth2") cat {data}/a;;
          "-c eth2") cat {data}/c;;
          "-i eth2") cat {data}/i;;
          *) echo "netlink error: Operation not supported" >&2; exit 1;;
        esac
        """)
    lspci = _script(tmp_path / "lspci", f"""\
        [ "$*" = "-vv -s 0000:01:00.0" ] && exec cat {data}/lspci
        exit 1
        """)
    return {"proc": proc, "sys_root": sysfs, "ethtool": ethtool, "lspci": lspci, "data": data}


def _snap(host, interface="eth2", **kw):
    args = {k: host[k] for k in ("proc", "sys_root", "ethtool", "lspci")}
    args.update(kw)
    return c.snapshot(interface, **args)


def test_fake_host_snapshot(fake_host):
    s = _snap(fake_host)
    json.dumps(s)
    assert s["interface"] == "eth2" and s["mtu"] == 9000
    assert s["net_dev"]["rx_packets"] == 987654321
    assert s["udp"]["InDatagrams"] == 1000
    assert s["softirqs"] == {"cpus": ["CPU0", "CPU1", "CPU2", "CPU3"], "NET_TX": [4, 0, 7, 9],
                             "NET_RX": [1687, 1825, 10, 20]}
    assert s["interface_interrupts"] == {"names": ["eth2", "0000:01:00.0"], "irqs": ["64", "65", "66"],
                                         "lines": ["64", "65", "66"]}
    e = s["ethtool"]
    assert e["statistics"]["lxoff_rx_count"] == 7 and e["pause"]["statistics"]["rx_pause_frames"] == 34
    assert e["coalesce"]["rx-usecs"] == 50 and e["driver"]["driver"] == "ixgbe"
    d = s["device"]
    assert d["driver"] == "ixgbe" and d["node"] == "0000:01:00.0"
    pci = d["pci"]
    assert (pci["address"], pci["vendor"], pci["device"], pci["numa_node"]) == ("0000:01:00.0", "0x8086", "0x10fb", 0)
    assert pci["link"] == {"current_link_speed": "5.0 GT/s PCIe", "current_link_width": 4,
                           "max_link_speed": "5.0 GT/s PCIe", "max_link_width": 8}
    assert pci["lspci"]["max_read_request_bytes"] == 512 and pci["msi_irqs"] == ["64", "65", "66"]


def test_fake_host_delta(fake_host):
    before = _snap(fake_host)
    _write_proc(fake_host["proc"], after=True)
    (fake_host["data"] / "S").write_text(ETHTOOL_S_AFTER)
    after = _snap(fake_host)
    d = c.delta(before, after)
    json.dumps(d)
    assert d["interval_ns"] >= 0 and d["interface"] == "eth2"
    cpu0 = d["cpu"]["per_cpu"]["cpu0"]
    assert cpu0["jiffies"] == {"user": 60, "nice": 0, "system": 20, "idle": 10, "iowait": 0, "irq": 5,
                               "softirq": 5, "steal": 0, "guest": 0, "guest_nice": 0}
    assert cpu0["percent"] == {"user": 60.0, "nice": 0.0, "system": 20.0, "idle": 10.0, "iowait": 0.0, "irq": 5.0,
                               "softirq": 5.0, "steal": 0.0}
    assert cpu0["busy_percent"] == pytest.approx(90.0)
    assert d["cpu"]["per_cpu"]["cpu1"]["busy_percent"] is None  # no time passed there
    assert d["cpu"]["total"]["percent"]["user"] == pytest.approx(60.0)
    assert (d["cpu"]["intr_total"], d["cpu"]["ctxt"]) == (1000, 100)
    irq = d["interrupts"]
    assert irq["interface"]["lines"]["65"]["per_cpu"] == [100, 0, 0, 0]
    assert irq["interface"]["per_cpu"] == [100, 50, 0, 0] and irq["interface"]["total"] == 150
    assert irq["busy_lines"] == {"8": 11, "65": 100, "66": 50, "LOC": 500}  # IRQ 8's 32-bit count wrapped
    assert irq["all"]["per_cpu"] == [100, 50, 0, 511] and irq["all"]["total"] == 661
    assert d["softirqs"]["NET_RX"] == {"per_cpu": [100, 20, 0, 0], "total": 120}
    assert d["softirqs"]["NET_TX"]["total"] == 0
    assert d["udp"]["InDatagrams"] == 950 and d["udp"]["InErrors"] == 50 and d["udp"]["RcvbufErrors"] == 50
    assert d["net_dev"]["rx_packets"] == 1000 and d["net_dev"]["rx_bytes"] == 1_500_000 and d["net_dev"]["rx_drop"] == 50
    sn = d["softnet"]
    assert sn["per_cpu"][0] == {"cpu": 0, "processed": 0x20, "dropped": 0, "time_squeeze": 0, "received_rps": 0,
                                "flow_limit_count": 0}  # 32-bit counter wrapped
    assert sn["total"] == {"processed": 0x20 + 0x100, "dropped": 3, "time_squeeze": 1, "received_rps": 0,
                           "flow_limit_count": 0}
    assert d["ethtool_statistics"]["rx_missed_errors"] == 28
    assert d["pause_frames"] == {"lxon_rx_count": 0, "lxoff_rx_count": 12, "lxon_tx_count": 0, "lxoff_tx_count": 0}
    assert d["pause_statistics"] == {"tx_pause_frames": 0, "rx_pause_frames": 0}
    assert d["settings"]["mtu"] == 9000 and d["settings"]["pause"]["rx"] is True
    assert "statistics" not in d["settings"]["pause"]
    assert d["settings"]["coalesce"]["rx-usecs"] == 50 and d["settings_changed"] == []


def test_settings_change_is_reported(fake_host):
    before = _snap(fake_host)
    (fake_host["sys_root"] / "class" / "net" / "eth2" / "mtu").write_text("1500\n")
    (fake_host["data"] / "c").write_text(ETHTOOL_C.replace("rx-usecs: 50", "rx-usecs: 0"))
    d = c.delta(before, _snap(fake_host))
    assert d["settings"]["mtu"] == 1500 and d["settings_changed"] == ["mtu", "coalesce"]


def test_delta_refuses_other_interface(fake_host):
    with pytest.raises(ValueError, match="different interfaces"):
        c.delta(_snap(fake_host), _snap(fake_host, interface=None))


# --- unavailable --------------------------------------------------------------------------------

def test_missing_proc_files(tmp_path):
    s = c.snapshot(None, proc=tmp_path, sys_root=tmp_path)
    json.dumps(s)
    for key in ("cpu", "interrupts", "softirqs", "softnet", "udp"):
        assert c.is_unavailable(s[key]) and "No such file or directory" in s[key]["unavailable"], key
    for key in ("net_dev", "mtu", "ethtool", "device", "interface_interrupts"):
        assert s[key] == {"unavailable": "no interface given"}
    d = c.delta(s, s)
    assert d["cpu"]["unavailable"].startswith("before: cannot read")
    assert d["ethtool_statistics"] == {"unavailable": "before: no interface given"}
    assert d["settings"]["coalesce"] == {"unavailable": "no interface given"}
    assert c.is_unavailable(d["interrupts"])


def test_unparsable_proc_file(tmp_path):
    (tmp_path / "stat").write_text("garbage\n")
    (tmp_path / "interrupts").write_text("no header here\n 1: 2\n")
    s = c.snapshot(None, proc=tmp_path)
    assert s["cpu"]["unavailable"].startswith("cannot parse") and s["interrupts"]["unavailable"].startswith("cannot parse")


def test_no_ethtool_no_lspci_no_such_interface(fake_host, tmp_path):
    s = _snap(fake_host, ethtool=str(tmp_path / "no-ethtool"), lspci=str(tmp_path / "no-lspci"))
    for part in ("statistics", "pause", "coalesce", "driver"):
        assert s["ethtool"][part] == {"unavailable": f"{tmp_path / 'no-ethtool'} not installed"}
    assert s["device"]["pci"]["lspci"] == {"unavailable": f"{tmp_path / 'no-lspci'} not installed"}
    d = c.delta(s, s)
    assert d["ethtool_statistics"]["unavailable"].endswith("not installed") and "pause_statistics" not in d
    ghost = _snap(fake_host, interface="eth7")
    assert ghost["net_dev"]["unavailable"].startswith("no interface eth7")
    assert ghost["mtu"]["unavailable"].startswith("cannot read")
    assert "no device" in ghost["device"]["unavailable"]
    assert ghost["ethtool"]["statistics"] == {"unavailable": f"{fake_host['ethtool']} -S eth7: "
                                              "netlink error: Operation not supported"}


def test_conventional_pci_has_no_link(fake_host):
    function = (fake_host["sys_root"] / "class" / "net" / "eth2" / "device").resolve()
    for name in ("current_link_speed", "current_link_width", "max_link_speed", "max_link_width"):
        (function / name).unlink()
    assert "no PCIe link" in _snap(fake_host)["device"]["pci"]["link"]["unavailable"]


def test_ethtool_timeout(fake_host, tmp_path):
    slow = _script(tmp_path / "slow-ethtool", "exec sleep 3\n")
    s = _snap(fake_host, ethtool=slow, timeout_s=0.2)
    assert s["ethtool"]["statistics"] == {"unavailable": f"{slow} -S eth2 timed out after 0.2 s"}
    assert s["ethtool"]["pause"]["unavailable"].endswith("timed out after 0.2 s")


# --- this machine ------------------------------------------------------------------------------------

def _udp_burst(n: int) -> None:
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    with rx, tx:
        rx.bind(("127.0.0.1", 0))
        rx.settimeout(5)
        for _ in range(n):
            tx.sendto(b"n" * 64, rx.getsockname())
        for _ in range(n):
            rx.recv(2048)


def test_loopback_on_this_machine():
    before = c.snapshot("lo")
    _udp_burst(100)
    after = c.snapshot("lo")
    d = c.delta(before, after)
    json.dumps(d)
    assert before["mtu"] == int(Path("/sys/class/net/lo/mtu").read_text())
    assert "cpu0" in before["cpu"]["cpus"] and before["interrupts"]["cpus"]
    assert c.is_unavailable(before["device"]) and c.is_unavailable(before["interface_interrupts"])
    assert c.is_unavailable(before["ethtool"]["statistics"])  # loopback has no NIC statistics
    assert d["udp"]["OutDatagrams"] >= 100 and d["udp"]["InDatagrams"] >= 100
    assert d["net_dev"]["tx_packets"] >= 100 and d["net_dev"]["rx_packets"] >= 100
    assert d["softirqs"]["NET_RX"]["total"] >= 1 and d["softnet"]["total"]["processed"] >= 100
    assert d["interval_ns"] > 0 and d["cpu"]["total"]["jiffies"]["idle"] >= 0


def test_every_interface_here():
    for net in sorted(Path("/sys/class/net").iterdir()):
        s = c.snapshot(net.name)
        json.dumps(s)
        assert s["mtu"] == int((net / "mtu").read_text())
        assert not c.is_unavailable(s["net_dev"])
        if (net / "device").exists() and not c.is_unavailable(s["device"]["pci"]):
            assert s["device"]["pci"]["address"] in s["interface_interrupts"]["names"]


def test_command_line():
    p = subprocess.run([sys.executable, "-m", "nicrig.udpmon.counters", "-i", "lo"], capture_output=True, text=True,
                       timeout=60, check=True)
    assert json.loads(p.stdout)["interface"] == "lo"


# --- both ends of a test, each in its own namespace ------------------------------------------------

RECEIVE = """
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind((sys.argv[1], 0))
print(s.getsockname()[1], flush=True)
s.settimeout(20)
for _ in range(int(sys.argv[2])):
    s.recv(2048)
print("done", flush=True)
"""

SEND = """
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for _ in range(int(sys.argv[3])):
    s.sendto(b"d" * 1000, (sys.argv[1], int(sys.argv[2])))
"""


def _host_snapshot(host) -> dict:
    p = host.run([sys.executable, "-m", "nicrig.udpmon.counters", "-i", host.interface], check=True)
    return json.loads(p.stdout)


def test_both_hosts_count_a_udp_stream(two_hosts):  # noqa: F811
    h, n = two_hosts, 50
    before_a, before_b = _host_snapshot(h.a), _host_snapshot(h.b)
    receiver = h.b.popen([sys.executable, "-c", RECEIVE, h.b.address, str(n)], stdout=subprocess.PIPE, text=True)
    port = receiver.stdout.readline().strip()
    h.a.run([sys.executable, "-c", SEND, h.b.address, port, str(n)], check=True)
    assert receiver.communicate(timeout=30)[0].strip() == "done"
    da, db = c.delta(before_a, _host_snapshot(h.a)), c.delta(before_b, _host_snapshot(h.b))
    if h.isolated:  # a namespace of our own: nobody else's UDP
        assert da["udp"]["OutDatagrams"] == n and db["udp"]["InDatagrams"] == n
        assert n <= da["net_dev"]["tx_packets"] <= n + 3  # + ARP
        assert n <= db["net_dev"]["rx_packets"] <= n + 3
        assert db["net_dev"]["rx_bytes"] >= n * (1000 + 42)
        assert c.is_unavailable(da["settings"]["device"])  # veth: no device, no interrupts of its own
        assert da["settings"]["mtu"] == 1500
        assert isinstance(da["ethtool_statistics"], dict)  # veth's NIC statistics, or why there are none
    else:
        assert da["udp"]["OutDatagrams"] >= n and db["udp"]["InDatagrams"] >= n
