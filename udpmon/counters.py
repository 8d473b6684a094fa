"""Host counters read before and after a udpmon test, on both hosts.

UDPmon (Hughes-Jones et al. 2003, §3.2) records the CPU load and the interrupts on both
hosts of every test point.  :func:`snapshot` reads what this host offers about
itself and one network interface; :func:`delta` turns two snapshots into what
happened in between.  Both return plain dicts that ``json.dumps`` accepts.

Sources (Linux):

* ``/proc/stat``: jiffies per CPU (units of ``clk_tck``, USER_HZ, per second)
  in user, nice, system, idle, iowait, irq, softirq, steal (guest time is
  already inside user); ``intr`` (all interrupts) and ``ctxt``.
* ``/proc/interrupts``: per-CPU counts of every line; the lines of the
  interface are those whose IRQ is one of its PCI function's MSI/MSI-X vectors
  (sysfs ``msi_irqs``) or whose name carries the interface, its device node
  (``virtio2``) or its PCI address (``mlx5_comp0@pci:0000:01:00.0``).
* ``/proc/softirqs``: NET_RX and NET_TX per CPU.
* ``/proc/net/snmp``: the Udp row (InDatagrams, NoPorts, InErrors, ...).
* ``/proc/net/dev``: the interface's packet, byte, error and drop counters.
* ``/proc/net/softnet_stat``: per CPU (hex) packets processed, dropped
  (backlog full) and time_squeeze (NAPI budget or time ran out).
* ``ethtool -S`` (NIC statistics, pause-frame counters among them), ``-a``
  (pause settings, with ``-I`` its statistics), ``-c`` (interrupt
  coalescing), ``-i`` (driver); run with a timeout.
* sysfs: MTU, the driver, the PCI function, its PCIe link (current and max
  speed and width); ``lspci -vv`` for MaxPayload, MaxReadReq, PCI-X and 66 MHz.

Whatever the host cannot give (no file, no ethtool, "Operation not supported"
as on veth and loopback, no PCI device) is recorded as
``{"unavailable": "<reason>"}``; nothing is invented.  ``/proc/net`` and
``/sys/class/net`` describe the network namespace of the reading process:
inside a namespace, run ``python -m nicrig.udpmon.counters -i IF`` there
(e.g. under ``ip netns exec``), which prints the snapshot as JSON.

Every parser is a pure ``text -> dict`` function, tested on sample texts;
the readers around them are thin.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

SNAPSHOT_VERSION = 1
CPU_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal", "guest", "guest_nice")
CPU_TIME_FIELDS = CPU_FIELDS[:8]  # guest and guest_nice are already counted in user and nice
NET_DEV_FIELDS = (
    "rx_bytes", "rx_packets", "rx_errs", "rx_drop", "rx_fifo", "rx_frame", "rx_compressed", "rx_multicast",
    "tx_bytes", "tx_packets", "tx_errs", "tx_drop", "tx_fifo", "tx_colls", "tx_carrier", "tx_compressed",
)
# Columns of /proc/net/softnet_stat by position; 3-8 were retired and print 0.
SOFTNET_COLUMNS = {0: "processed", 1: "dropped", 2: "time_squeeze", 9: "received_rps", 10: "flow_limit_count",
                   11: "backlog_len", 12: "cpu", 13: "input_qlen", 14: "process_qlen"}
SOFTNET_GAUGES = ("backlog_len", "input_qlen", "process_qlen")  # levels, not counters
PAUSE_KEY = re.compile(r"pause|xon|xoff|flow_control|flow_ctrl|\bfc_|_fc_", re.IGNORECASE)
PCI_ADDRESS = re.compile(r"^[0-9a-f]{4,}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
U32 = 1 << 32  # per-CPU interrupt, softirq and softnet counters are 32-bit in the kernel
DEFAULT_TIMEOUT_S = 5.0

Json = dict[str, Any]


def unavailable(reason: str) -> Json:
    """The record of something this host cannot provide."""
    return {"unavailable": reason}


def is_unavailable(value: Any) -> bool:
    return isinstance(value, Mapping) and set(value) == {"unavailable"}


def _number(text: str) -> int | float | str:
    try:
        return int(text)
    except ValueError:
        try:
            return float(text)
        except ValueError:
            return text


def _setting(text: str) -> int | float | str | bool | None:
    """An ethtool setting: on/off as bool, n/a as None, numbers as numbers."""
    low = text.lower()
    if low in ("on", "off"):
        return low == "on"
    if low == "n/a":
        return None
    return _number(text)


# --- parsers: text -> dict ------------------------------------------------------------------

def parse_proc_stat(text: str) -> Json:
    """``/proc/stat`` -> ``{"cpus": {"cpu": {...}, "cpu0": {...}}, "intr_total": n, "ctxt": n}`` (jiffies)."""
    cpus: dict[str, dict[str, int]] = {}
    out: Json = {"cpus": cpus}
    for line in text.splitlines():
        parts = line.split()
        if not parts:
            continue
        if parts[0].startswith("cpu"):
            cpus[parts[0]] = {f: int(v) for f, v in zip(CPU_FIELDS, parts[1:])}
        elif parts[0] == "intr" and len(parts) > 1:
            out["intr_total"] = int(parts[1])
        elif parts[0] == "ctxt" and len(parts) > 1:
            out["ctxt"] = int(parts[1])
    if not cpus:
        raise ValueError("no cpu lines")
    return out


def _per_cpu_table(text: str) -> tuple[list[str], list[tuple[str, list[int], str]]]:
    """The common shape of /proc/interrupts and /proc/softirqs: a CPU header, then ``NAME: counts... rest``."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        raise ValueError("empty")
    cpus = lines[0].split()
    if not cpus or not all(c.startswith("CPU") for c in cpus):
        raise ValueError(f"no CPU header: {lines[0]!r}")
    rows = []
    for line in lines[1:]:
        name, sep, rest = line.partition(":")
        if not sep:
            continue
        tokens = rest.split()
        counts: list[int] = []
        while len(counts) < len(cpus) and len(counts) < len(tokens) and tokens[len(counts)].isdigit():
            counts.append(int(tokens[len(counts)]))
        rows.append((name.strip(), counts, " ".join(tokens[len(counts):])))
    return cpus, rows


def parse_interrupts(text: str) -> Json:
    """``/proc/interrupts`` -> ``{"cpus": [...], "lines": {"38": {"counts": [per CPU], "total": n, "desc": ...}}}``.

    ``desc`` is the rest of the line (chip, hardware IRQ, trigger, action names).
    Lines such as ``ERR`` and ``MIS`` carry one count, not one per CPU.
    """
    cpus, rows = _per_cpu_table(text)
    return {"cpus": cpus,
            "lines": {name: {"counts": counts, "total": sum(counts), "desc": desc} for name, counts, desc in rows}}


def parse_softirqs(text: str) -> Json:
    """``/proc/softirqs`` -> ``{"cpus": [...], "NET_RX": [per CPU], "NET_TX": [...], ...}`` (every row)."""
    cpus, rows = _per_cpu_table(text)
    out: Json = {"cpus": cpus}
    out.update({name: counts for name, counts, _ in rows})
    return out


def parse_snmp(text: str) -> Json:
    """``/proc/net/snmp`` (header line, value line per protocol) -> ``{"Udp": {"InDatagrams": n, ...}, ...}``."""
    out: Json = {}
    pending: dict[str, list[str]] = {}
    for line in text.splitlines():
        proto, sep, rest = line.partition(":")
        if not sep:
            continue
        fields = rest.split()
        if proto in pending:
            names = pending.pop(proto)
            if len(names) != len(fields):
                raise ValueError(f"{proto}: {len(names)} names but {len(fields)} values")
            out[proto] = {n: int(v) for n, v in zip(names, fields)}
        else:
            pending[proto] = fields
    return out


def parse_net_dev(text: str) -> Json:
    """``/proc/net/dev`` -> ``{"eth0": {"rx_bytes": n, "rx_packets": n, ..., "tx_compressed": n}}``."""
    out: Json = {}
    for line in text.splitlines():
        name, sep, rest = line.partition(":")
        if not sep or "|" in line:
            continue
        values = rest.split()
        if len(values) != len(NET_DEV_FIELDS):
            raise ValueError(f"{name.strip()}: {len(values)} values, expected {len(NET_DEV_FIELDS)}")
        out[name.strip()] = {f: int(v) for f, v in zip(NET_DEV_FIELDS, values)}
    return out


def parse_softnet_stat(text: str) -> list[Json]:
    """``/proc/net/softnet_stat`` (hex, one line per online CPU) -> one dict per line.

    Kernels since 5.10 print the CPU number (column 12); before that the line
    index stands in for it, which is only right while every CPU is online.
    """
    out = []
    for index, line in enumerate(ln for ln in text.splitlines() if ln.strip()):
        values = [int(v, 16) for v in line.split()]
        row = {name: values[col] for col, name in SOFTNET_COLUMNS.items() if col < len(values)}
        row.setdefault("cpu", index)
        out.append(row)
    return out


def parse_ethtool_statistics(text: str) -> Json:
    """``ethtool -S IF`` ("NIC statistics:" then ``name: value`` lines) -> ``{name: value}``."""
    out: Json = {}
    for line in text.splitlines():
        name, sep, value = line.strip().rpartition(":")
        if sep and name and value.strip():
            out[name.strip()] = _number(value.strip())
    return out


def pause_counters(statistics: Mapping[str, Any]) -> Json:
    """The NIC statistics that count 802.3x PAUSE / XON / XOFF (flow control) frames.

    Drivers name them differently: e1000e ``rx_flow_control_xon``, ixgbe
    ``lxon_rx_count``, mlx5 ``rx_pause_ctrl_phy``, ethtool's standard
    ``tx_pause_frames``.
    """
    return {k: v for k, v in statistics.items() if PAUSE_KEY.search(k)}


def _key(text: str) -> str:
    return "-".join(text.strip().lower().split())


def parse_ethtool_pause(text: str) -> Json:
    """``ethtool [-I] -a IF`` -> ``{"autonegotiate": bool, "rx": bool, "tx": bool, ..., "statistics": {...}}``."""
    out: Json = {}
    stats: Json | None = None
    for line in text.splitlines():
        if not line.strip() or line.startswith("Pause parameters for"):
            continue
        name, sep, value = line.partition(":")
        if not sep:
            continue
        if name.strip() == "Statistics" and not value.strip():
            stats = out.setdefault("statistics", {})
            continue
        if stats is not None and line[:1].isspace():
            stats[name.strip()] = _number(value.strip())
        else:
            out[_key(name)] = _setting(value.strip())
    return out


def parse_ethtool_coalesce(text: str) -> Json:
    """``ethtool -c IF`` -> ``{"adaptive-rx": bool, "rx-usecs": int, "rx-frames": int, ...}``.

    "n/a" (not supported by the driver) becomes None.  Lines holding two
    settings ("Adaptive RX: off  TX: n/a") give ``adaptive-rx`` and ``adaptive-tx``.
    """
    out: Json = {}
    for line in text.splitlines():
        if not line.strip() or line.startswith("Coalesce parameters for"):
            continue
        prefix = ""
        for segment in re.split(r"\s{2,}|\t+", line.strip()):
            name, sep, value = segment.partition(":")
            if not sep:
                continue
            words = name.split()
            if prefix and len(words) == 1:
                words = [*prefix.split(), *words]
            elif len(words) > 1 and words[-1] in ("RX", "TX"):
                prefix = " ".join(words[:-1])
            out[_key(" ".join(words))] = _setting(value.strip())
    return out


def parse_ethtool_driver(text: str) -> Json:
    """``ethtool -i IF`` -> ``{"driver": ..., "version": ..., "bus-info": ..., ...}`` (strings)."""
    out: Json = {}
    for line in text.splitlines():
        name, sep, value = line.partition(":")
        if sep:
            out[name.strip()] = value.strip()
    return out


def _link(text: str) -> Json:
    out: Json = {"raw": text.strip()}
    if m := re.search(r"Speed ([\d.]+GT/s|unknown)", text):
        out["speed"] = m.group(1)
    if m := re.search(r"Width x(\d+)", text):
        out["width"] = int(m.group(1))
    return out


def parse_lspci(text: str) -> Json:
    """``lspci -vv -s ADDR`` -> what it says of the function's bus (only the fields present).

    PCI Express: ``max_payload_supported_bytes`` (DevCap), ``max_payload_bytes``
    and ``max_read_request_bytes`` (DevCtl, in force), ``link_capability`` and
    ``link_status`` (speed, width).  PCI-X: ``pcix_max_read_byte_count`` (RBC,
    in force), ``pcix_designed_max_read_byte_count`` (DMMRBC), ``pcix_133mhz``.
    Conventional PCI: ``pci_66mhz_capable``.  ``capabilities`` is unavailable
    when lspci may not read them (not root).
    """
    out: Json = {}
    first = text.strip().splitlines()[0] if text.strip() else ""
    if first:
        out["description"] = first.split(" ", 1)[1] if " " in first else first
    if m := re.search(r"^\s*Kernel driver in use:\s*(\S+)", text, re.MULTILINE):
        out["kernel_driver"] = m.group(1)
    if "<access denied>" in text:
        out["capabilities"] = unavailable("lspci: capabilities <access denied> (needs root)")
        return out
    if m := re.search(r"^\s*Status:\s*Cap[+-]\s+66MHz([+-])", text, re.MULTILINE):
        out["pci_66mhz_capable"] = m.group(1) == "+"
    out["express"] = bool(re.search(r"Capabilities: \[[0-9a-f]+\] Express", text))
    if m := re.search(r"DevCap:\s*MaxPayload (\d+) bytes", text):
        out["max_payload_supported_bytes"] = int(m.group(1))
    if m := re.search(r"MaxPayload (\d+) bytes, MaxReadReq (\d+) bytes", text):
        out["max_payload_bytes"], out["max_read_request_bytes"] = int(m.group(1)), int(m.group(2))
    if m := re.search(r"^\s*LnkCap:\s*(.*)$", text, re.MULTILINE):
        out["link_capability"] = _link(m.group(1))
    if m := re.search(r"^\s*LnkSta:\s*(.*)$", text, re.MULTILINE):
        out["link_status"] = _link(m.group(1))
    out["pcix"] = bool(re.search(r"Capabilities: \[[0-9a-f]+\] PCI-X", text))
    if out["pcix"]:
        if m := re.search(r"\bRBC=(\d+)", text):
            out["pcix_max_read_byte_count"] = int(m.group(1))
        if m := re.search(r"\bDMMRBC=(\d+)", text):
            out["pcix_designed_max_read_byte_count"] = int(m.group(1))
        if m := re.search(r"\b133MHz([+-])", text):
            out["pcix_133mhz"] = m.group(1) == "+"
    return out


def select_interrupts(parsed: Mapping[str, Any], names: list[str], irqs: list[str]) -> list[str]:
    """The lines of :func:`parse_interrupts` output that belong to a device.

    A line belongs when its IRQ number is in ``irqs`` or one of ``names``
    appears in its description as a whole token (``eth0`` in ``eth0-TxRx-0``,
    not in ``eth01``).
    """
    patterns = [re.compile(r"(?<![A-Za-z0-9])" + re.escape(n) + r"(?![A-Za-z0-9])") for n in names if n]
    wanted = set(irqs)
    return [irq for irq, line in parsed["lines"].items()
            if irq in wanted or any(p.search(line["desc"]) for p in patterns)]


# --- readers ------------------------------------------------------------------------------------

def _read_file(path: Path, parse: Callable[[str], Any]) -> Any:
    try:
        text = path.read_text()
    except OSError as e:
        return unavailable(f"cannot read {path}: {e.strerror or e}")
    try:
        return parse(text)
    except (ValueError, IndexError) as e:
        return unavailable(f"cannot parse {path}: {e}")


def _run(argv: list[str], timeout_s: float) -> tuple[str | None, str]:
    """``(stdout, "")`` on success, else ``(None, reason)``."""
    shown = " ".join(argv)
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s,
                           env={**os.environ, "LC_ALL": "C"}, check=False)
    except FileNotFoundError:
        return None, f"{argv[0]} not installed"
    except subprocess.TimeoutExpired:
        return None, f"{shown} timed out after {timeout_s:g} s"
    except OSError as e:
        return None, f"{shown}: {e.strerror or e}"
    if p.returncode != 0:
        message = (p.stderr.strip() or p.stdout.strip() or f"exit status {p.returncode}").splitlines()[-1]
        return None, f"{shown}: {message.strip()}"
    return p.stdout, ""


def _run_parsed(argv: list[str], parse: Callable[[str], Json], timeout_s: float) -> Json:
    out, reason = _run(argv, timeout_s)
    if out is None:
        return unavailable(reason)
    parsed = parse(out)
    return parsed if parsed else unavailable(f"{' '.join(argv)}: nothing parsed from its output")


def _ethtool(ethtool: str, interface: str, timeout_s: float) -> Json:
    stats = _run_parsed([ethtool, "-S", interface], parse_ethtool_statistics, timeout_s)
    pause = _run_parsed([ethtool, "-I", "-a", interface], parse_ethtool_pause, timeout_s)
    if is_unavailable(pause) and "not installed" not in pause["unavailable"]:
        plain = _run_parsed([ethtool, "-a", interface], parse_ethtool_pause, timeout_s)
        pause = pause if is_unavailable(plain) else plain
    return {
        "statistics": stats,
        "pause": pause,
        "coalesce": _run_parsed([ethtool, "-c", interface], parse_ethtool_coalesce, timeout_s),
        "driver": _run_parsed([ethtool, "-i", interface], parse_ethtool_driver, timeout_s),
    }


def _sysfs_text(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _pci_function(device: Path) -> Path | None:
    """The PCI function at or above a net device's sysfs ``device`` (virtio sits one below it)."""
    for p in (device, *device.parents):
        if PCI_ADDRESS.match(p.name):
            return p
        if p.name.startswith("pci") or p.name == "devices":
            break
    return None


def _pci(function: Path, lspci: str, timeout_s: float) -> Json:
    out: Json = {"address": function.name}
    for name in ("vendor", "device", "subsystem_vendor", "subsystem_device", "class", "local_cpulist"):
        if (value := _sysfs_text(function / name)) is not None:
            out[name] = value
    if (numa := _sysfs_text(function / "numa_node")) is not None:
        out["numa_node"] = int(numa)
    link = {name: _sysfs_text(function / name) for name in
            ("current_link_speed", "current_link_width", "max_link_speed", "max_link_width")}
    if all(v is None for v in link.values()):
        out["link"] = unavailable("no PCIe link attributes in sysfs (conventional PCI, PCI-X or virtual)")
    else:
        out["link"] = {k: (int(v) if v is not None and v.isdigit() else v) for k, v in link.items()}
    msi = function / "msi_irqs"
    out["msi_irqs"] = sorted((p.name for p in msi.iterdir()), key=int) if msi.is_dir() else []
    out["lspci"] = _run_parsed([lspci, "-vv", "-s", function.name], parse_lspci, timeout_s)
    return out


def _device(net: Path, lspci: str, timeout_s: float) -> Json:
    link = net / "device"
    if not link.exists():
        return unavailable(f"{net.name} has no device in sysfs (virtual interface: loopback, veth, bridge ...)")
    device = link.resolve()
    out: Json = {"sysfs": str(device), "node": device.name}
    driver = link / "driver"
    out["driver"] = driver.resolve().name if driver.exists() else None
    function = _pci_function(device)
    out["pci"] = _pci(function, lspci, timeout_s) if function else unavailable(f"{device} is not on PCI")
    return out


def snapshot(interface: str | None = None, *, proc: str | Path = "/proc", sys_root: str | Path = "/sys",
             ethtool: str = "ethtool", lspci: str = "lspci", timeout_s: float = DEFAULT_TIMEOUT_S) -> Json:
    """Every counter and setting this host gives about itself and ``interface`` (see the module docstring).

    ``proc``, ``sys_root``, ``ethtool`` and ``lspci`` are there for tests.
    """
    proc, sys_root = Path(proc), Path(sys_root)
    snap: Json = {
        "version": SNAPSHOT_VERSION,
        "monotonic_ns": time.monotonic_ns(),
        "realtime_ns": time.time_ns(),
        "hostname": socket.gethostname(),
        "interface": interface,
        "clk_tck": os.sysconf("SC_CLK_TCK"),
        "cpu": _read_file(proc / "stat", parse_proc_stat),
        "interrupts": _read_file(proc / "interrupts", parse_interrupts),
        "softirqs": _read_file(proc / "softirqs", parse_softirqs),
        "softnet": _read_file(proc / "net" / "softnet_stat", parse_softnet_stat),
    }
    snmp = _read_file(proc / "net" / "snmp", parse_snmp)
    snap["udp"] = snmp if is_unavailable(snmp) else snmp.get("Udp", unavailable("no Udp row in /proc/net/snmp"))
    if not is_unavailable(snap["softirqs"]):
        snap["softirqs"] = {k: v for k, v in snap["softirqs"].items() if k in ("cpus", "NET_RX", "NET_TX")}

    if interface is None:
        for key in ("net_dev", "mtu", "ethtool", "device"):
            snap[key] = unavailable("no interface given")
        snap["interface_interrupts"] = unavailable("no interface given")
        return snap

    net = sys_root / "class" / "net" / interface
    dev = _read_file(proc / "net" / "dev", parse_net_dev)
    snap["net_dev"] = dev if is_unavailable(dev) else dev.get(
        interface, unavailable(f"no interface {interface} in {proc / 'net' / 'dev'}"))
    mtu = _sysfs_text(net / "mtu")
    snap["mtu"] = int(mtu) if mtu is not None else unavailable(f"cannot read {net / 'mtu'}")
    snap["ethtool"] = _ethtool(ethtool, interface, timeout_s)
    snap["device"] = _device(net, lspci, timeout_s)

    if is_unavailable(snap["interrupts"]):
        snap["interface_interrupts"] = snap["interrupts"]
    elif is_unavailable(snap["device"]):
        snap["interface_interrupts"] = unavailable(f"{interface} has no device, so no interrupts of its own")
    else:
        device = snap["device"]
        pci = device["pci"]
        names = [interface, device["node"]]
        irqs: list[str] = []
        if not is_unavailable(pci):
            names.append(pci["address"])
            irqs = pci["msi_irqs"]
        names = list(dict.fromkeys(names))
        snap["interface_interrupts"] = {"names": names, "irqs": irqs,
                                        "lines": select_interrupts(snap["interrupts"], names, irqs)}
    return snap


# --- delta -----------------------------------------------------------------------------------

def _either_unavailable(before: Any, after: Any) -> Json | None:
    for side, value in (("before", before), ("after", after)):
        if is_unavailable(value):
            return unavailable(f"{side}: {value['unavailable']}")
        if value is None:
            return unavailable(f"{side}: missing")
    return None


def _counter_delta(before: Mapping[str, Any], after: Mapping[str, Any], wrap: int | None = None) -> Json:
    out: Json = {}
    for key, a in after.items():
        b = before.get(key)
        if isinstance(a, int) and not isinstance(a, bool) and isinstance(b, int) and not isinstance(b, bool):
            out[key] = (a - b) % wrap if wrap else a - b
    return out


def _list_delta(before: list[int], after: list[int], wrap: int = U32) -> list[int]:
    return [(a - b) % wrap for a, b in zip(after, before)]


def _cpu_delta(before: Json, after: Json) -> Json:
    out: Json = {"per_cpu": {}}
    for name, a in after["cpus"].items():
        b = before["cpus"].get(name)
        if b is None:
            continue
        jiffies = _counter_delta(b, a)
        total = sum(jiffies.get(f, 0) for f in CPU_TIME_FIELDS)
        percent = {f: (100.0 * jiffies[f] / total if total else None) for f in CPU_TIME_FIELDS if f in jiffies}
        idle = (percent.get("idle") or 0.0) + (percent.get("iowait") or 0.0)
        row = {"jiffies": jiffies, "percent": percent, "busy_percent": (100.0 - idle) if total else None}
        if name == "cpu":
            out["total"] = row
        else:
            out["per_cpu"][name] = row
    for key in ("intr_total", "ctxt"):
        if key in after and key in before:
            out[key] = after[key] - before[key]
    return out


def _interrupts_delta(before: Json, after: Json, selected: Any) -> Json:
    lines: Json = {}
    all_per_cpu = [0] * len(after["cpus"])
    all_total = 0
    for irq, a in after["lines"].items():
        b = before["lines"].get(irq)
        if b is None or len(b["counts"]) != len(a["counts"]):
            continue
        d = _list_delta(b["counts"], a["counts"])
        lines[irq] = {"per_cpu": d, "total": sum(d), "desc": a["desc"]}
        all_total += sum(d)
        if len(d) == len(all_per_cpu):
            all_per_cpu = [x + y for x, y in zip(all_per_cpu, d)]
    out: Json = {"cpus": after["cpus"], "all": {"per_cpu": all_per_cpu, "total": all_total},
                 "busy_lines": {irq: v["total"] for irq, v in lines.items() if v["total"]}}
    if is_unavailable(selected):
        out["interface"] = selected
    else:
        mine = {irq: lines[irq] for irq in selected["lines"] if irq in lines}
        per_cpu = [sum(v["per_cpu"][i] for v in mine.values() if len(v["per_cpu"]) > i)
                   for i in range(len(after["cpus"]))]
        out["interface"] = {"names": selected["names"], "lines": mine, "per_cpu": per_cpu,
                            "total": sum(v["total"] for v in mine.values())}
    return out


def _softnet_delta(before: list[Json], after: list[Json]) -> Json:
    by_cpu = {row["cpu"]: row for row in before}
    per_cpu = []
    for a in after:
        b = by_cpu.get(a["cpu"])
        if b is None:
            continue
        d = _counter_delta({k: v for k, v in b.items() if k not in SOFTNET_GAUGES and k != "cpu"},
                           {k: v for k, v in a.items() if k not in SOFTNET_GAUGES and k != "cpu"}, U32)
        per_cpu.append({"cpu": a["cpu"], **d})
    keys = [k for k in ("processed", "dropped", "time_squeeze", "received_rps", "flow_limit_count")
            if all(k in row for row in per_cpu)]
    return {"per_cpu": per_cpu, "total": {k: sum(row[k] for row in per_cpu) for k in keys}}


def _delta_of(before: Json, after: Json, key: str, compute: Callable[[Any, Any], Json]) -> Json:
    b, a = before.get(key), after.get(key)
    return _either_unavailable(b, a) or compute(b, a)


def delta(before: Json, after: Json) -> Json:
    """What happened between two :func:`snapshot` results of the same host and interface.

    Counters become differences (32-bit kernel counters modulo 2**32); CPU
    jiffies also become percentages of each CPU's time (and ``busy_percent``,
    100 - idle - iowait).  Settings (MTU, pause, coalescing, driver, PCI) are
    those of ``after``; ``settings_changed`` names any that differ from
    ``before``.  A part unavailable on either side stays unavailable.
    """
    if before.get("interface") != after.get("interface"):
        raise ValueError(f"snapshots of different interfaces: {before.get('interface')} and {after.get('interface')}")
    out: Json = {
        "version": SNAPSHOT_VERSION,
        "hostname": after.get("hostname"),
        "interface": after.get("interface"),
        "interval_ns": after["monotonic_ns"] - before["monotonic_ns"],
        "clk_tck": after.get("clk_tck"),
        "cpu": _delta_of(before, after, "cpu", _cpu_delta),
        "softirqs": _delta_of(before, after, "softirqs", lambda b, a: {
            k: {"per_cpu": (d := _list_delta(b[k], a[k])), "total": sum(d)}
            for k in ("NET_RX", "NET_TX") if k in a and k in b}),
        "softnet": _delta_of(before, after, "softnet", _softnet_delta),
        "udp": _delta_of(before, after, "udp", _counter_delta),
        "net_dev": _delta_of(before, after, "net_dev", _counter_delta),
    }
    out["interrupts"] = _delta_of(before, after, "interrupts",
                                  lambda b, a: _interrupts_delta(b, a, after.get("interface_interrupts")))

    stats_b, stats_a = _ethtool_part(before, "statistics"), _ethtool_part(after, "statistics")
    stats = _either_unavailable(stats_b, stats_a)
    if stats is None:
        stats = _counter_delta(stats_b, stats_a)
        out["ethtool_statistics"] = stats
        out["pause_frames"] = pause_counters(stats)
    else:
        out["ethtool_statistics"] = out["pause_frames"] = stats
    pause_b, pause_a = _ethtool_part(before, "pause"), _ethtool_part(after, "pause")
    if isinstance(pause_a, Mapping) and isinstance(pause_b, Mapping) and "statistics" in pause_a \
            and "statistics" in pause_b:
        out["pause_statistics"] = _counter_delta(pause_b["statistics"], pause_a["statistics"])

    settings_before = _settings(before)
    settings_after = _settings(after)
    out["settings"] = settings_after
    out["settings_changed"] = [k for k in settings_after if settings_after[k] != settings_before.get(k)]
    return out


def _ethtool_part(snap: Json, part: str) -> Any:
    ethtool = snap.get("ethtool")
    if ethtool is None or is_unavailable(ethtool):
        return ethtool
    return ethtool.get(part)


def _settings(snap: Json) -> Json:
    pause = _ethtool_part(snap, "pause")
    if isinstance(pause, Mapping) and "statistics" in pause:
        pause = {k: v for k, v in pause.items() if k != "statistics"}
    return {"mtu": snap.get("mtu"), "pause": pause, "coalesce": _ethtool_part(snap, "coalesce"),
            "driver": _ethtool_part(snap, "driver"), "device": snap.get("device")}


def _number_or(value: Any, default: float) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else default


def load_figures(delta: Json) -> Json:
    """The inputs of Geist et al.'s (n.d.) CPU model ``T = alpha*N_MB + beta*N_KP + gamma*N_KI`` from one :func:`delta`.

    ``*_jiffies``: CPU time of all CPUs by kind (USER_HZ units, ``clk_tck`` per
    second); ``kernel_jiffies`` = system + irq + softirq (Geist et al.'s (n.d.) "system
    mode CPU time"), ``busy_jiffies`` = everything but idle and iowait.
    ``megabytes`` (10^6 bytes) and ``kilo_packets`` are the interface's
    received plus transmitted bytes and packets (``/proc/net/dev``: frames
    as the interface counts them, Ethernet headers included);
    ``kilo_interrupts`` the interface's own interrupt lines or, when it has
    none (veth, loopback), every interrupt of the host, as
    ``interrupt_source`` says (``"interface"`` or ``"host"``). Unavailable
    figures are NaN (``interrupt_source`` ``"none"``).
    """
    out: Json = {"interval_s": _number_or(delta.get("interval_ns"), math.nan) / 1e9,
                 "clk_tck": int(_number_or(delta.get("clk_tck"), -1))}
    cpu = delta.get("cpu")
    jiffies = cpu.get("total", {}).get("jiffies", {}) if isinstance(cpu, Mapping) and not is_unavailable(cpu) else {}
    for f in CPU_TIME_FIELDS:
        out[f"{f}_jiffies"] = _number_or(jiffies.get(f), math.nan)
    out["kernel_jiffies"] = out["system_jiffies"] + out["irq_jiffies"] + out["softirq_jiffies"]
    out["busy_jiffies"] = sum(out[f"{f}_jiffies"] for f in CPU_TIME_FIELDS if f not in ("idle", "iowait"))
    net = delta.get("net_dev")
    net = net if isinstance(net, Mapping) and not is_unavailable(net) else {}
    out["megabytes"] = (_number_or(net.get("rx_bytes"), math.nan) + _number_or(net.get("tx_bytes"), math.nan)) / 1e6
    out["kilo_packets"] = (_number_or(net.get("rx_packets"), math.nan)
                           + _number_or(net.get("tx_packets"), math.nan)) / 1e3
    irq = delta.get("interrupts")
    out["kilo_interrupts"], out["interrupt_source"] = math.nan, "none"
    if isinstance(irq, Mapping) and not is_unavailable(irq):
        itf = irq.get("interface")
        if isinstance(itf, Mapping) and itf.get("lines"):
            out["kilo_interrupts"], out["interrupt_source"] = _number_or(itf.get("total"), math.nan) / 1e3, "interface"
        elif isinstance(irq.get("all"), Mapping):
            out["kilo_interrupts"], out["interrupt_source"] = _number_or(irq["all"].get("total"), math.nan) / 1e3, "host"
    return out


def parse_link_speed(text: str) -> int | None:
    """``/sys/class/net/IF/speed`` (Mbit/s) -> the speed, or None when the device states none (-1, empty)."""
    try:
        speed = int(text.strip())
    except ValueError:
        return None
    return speed if speed > 0 else None


def link_speed_mbps(interface: str, sys_root: str | Path = "/sys") -> int | None:
    """The interface's link speed in Mbit/s, or None (veth, loopback and a link that is down state none)."""
    text = _sysfs_text(Path(sys_root) / "class" / "net" / interface / "speed")
    return None if text is None else parse_link_speed(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m nicrig.udpmon.counters",
                                     description="Print this host's counters (udpmon snapshot) as JSON.")
    parser.add_argument("-i", "--interface", help="network interface (e.g. eth0); omit for host-wide counters only")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, help="seconds per ethtool/lspci run")
    args = parser.parse_args(argv)
    json.dump(snapshot(args.interface, timeout_s=args.timeout), sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


def egress_interface(address: str) -> str | None:
    """The interface the route to ``address`` leaves by (``ip route get``), or None when unknown."""
    try:
        out = subprocess.run(["ip", "-o", "route", "get", address], capture_output=True, text=True, check=False,
                             timeout=5).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"\bdev (\S+)", out)
    return m.group(1) if m else None
