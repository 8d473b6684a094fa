"""Bus, NIC and host profiles of the simulated rig, loaded from ``data/profiles/<kind>/<name>.toml``.

Every timing of the model is a profile field, so a lab can describe its own
hardware in a TOML file (pass its path instead of a name) without touching code.
Every profile names where its numbers come from in ``source`` (for the built-in
ones, the sections of Hughes-Jones et al. 2003 their values reproduce, cited as a user reads
them: "Hughes-Jones et al. 2003, §4.2.3").
"""

from __future__ import annotations

import tomllib
from dataclasses import MISSING, dataclass, field, fields, replace
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

from nicrig.errors import UsageError


@dataclass(frozen=True)
class BusProfile:
    """A host's I/O bus (PCI Local Bus 3.0 / PCI-X 1.0)."""

    name: str
    description: str
    source: str
    kind: str
    width_bits: int
    clock_hz: float
    host_read_initial_wait_clocks: int
    host_write_initial_wait_clocks: int
    host_read_disconnect_bytes: int
    host_write_disconnect_bytes: int
    arbitration_clocks: int
    host_retry_clocks: int = 4

    @property
    def period_ps(self) -> float:
        """Clock period in picoseconds (66.67 MHz: 15000 ps)."""
        return 1e12 / self.clock_hz

    @property
    def bytes_per_clock(self) -> int:
        return self.width_bits // 8

    def check(self) -> None:
        _check_source(self.name, self.source)
        if self.width_bits not in (32, 64):
            raise UsageError(f"bus {self.name}: width_bits must be 32 or 64")
        if not 1e6 <= self.clock_hz <= 533e6:
            raise UsageError(f"bus {self.name}: clock_hz {self.clock_hz} out of range")
        for f in ("host_read_disconnect_bytes", "host_write_disconnect_bytes"):
            v = getattr(self, f)
            if v < self.bytes_per_clock or v & (v - 1):
                raise UsageError(f"bus {self.name}: {f} must be a power of two of at least one bus word")


@dataclass(frozen=True)
class NicProfile:
    """A NIC: its CSR usage by the driver, DMA behaviour, MAC, FIFOs, coalescence and flow control."""

    name: str
    description: str
    source: str
    vendor_device: str
    bar0: tuple[int, int]
    tx_csr: tuple[str, ...]
    isr_entry_csr: tuple[str, ...]
    isr_exit_csr: tuple[str, ...]
    csr_write_target_waits: int
    csr_read_target_waits: int
    csr_retries: int
    devsel: int
    dma_burst_bytes: int
    descriptor_bytes: int
    dma_burst_gap_clocks: int
    tx_fetch_latency_ns: float
    tx_mac_latency_ns: float
    rx_mac_latency_ns: float
    tx_int_delay_us: float
    rx_int_delay_us: float
    tx_abs_int_delay_us: float
    rx_abs_int_delay_us: float
    tx_fifo_bytes: int
    rx_fifo_bytes: int
    tx_ring: int
    rx_ring: int
    flow_control: bool
    fc_high_water_bytes: int
    fc_low_water_bytes: int
    pause_quanta: int
    send_xon: bool
    rx_dma_master_wait_every: int
    internal_ns_per_byte: float = 0.0
    rx_service_limit: int = 0
    csr_recovery_ns: float = 0.0
    csr_read_latency_ns: float = 0.0
    dma_read_burst_bytes: int = 0
    #: When the driver returns receive descriptors to the NIC: ``service`` at the end of the interrupt service,
    #: which also runs the stack for each frame; ``softirq`` after the stack, which the service leaves to the
    #: NET_RX softirq (Linux 2.4's netif_rx), has emptied the backlog: the e1000 of 2002 refills its ring
    #: from a tasklet, and 2.4's do_softirq runs NET_RX before tasklets.
    rx_refill: str = "service"
    #: The register accesses returning one receive descriptor in a ``softirq`` refill (e1000: the tail, RDT).
    rx_refill_csr: tuple[str, ...] = ()

    def check(self) -> None:
        _check_source(self.name, self.source)
        if self.rx_refill not in ("service", "softirq"):
            raise UsageError(f"nic {self.name}: rx_refill must be 'service' or 'softirq' (got {self.rx_refill!r})")
        for seq in (self.tx_csr, self.isr_entry_csr, self.isr_exit_csr, self.rx_refill_csr):
            for access in seq:
                op, _, reg = access.partition(":")
                if op not in ("r", "w") or not reg:
                    raise UsageError(f"nic {self.name}: CSR access {access!r} must look like 'r:0x0008' or 'w:0x3818'")
                if not 0 <= int(reg, 0) < self.bar0[1]:
                    raise UsageError(f"nic {self.name}: register {reg} outside BAR0 (size {self.bar0[1]:#x})")
        if not 1 <= self.devsel <= 3:
            raise UsageError(f"nic {self.name}: devsel must be 1 (fast), 2 (medium) or 3 (slow)")
        for f in ("dma_burst_bytes", "dma_read_burst_bytes"):
            v = getattr(self, f)
            if (v or f == "dma_burst_bytes") and (v < 8 or v % 8):
                raise UsageError(f"nic {self.name}: {f} must be a positive multiple of 8")
        if not 0 < self.fc_low_water_bytes < self.fc_high_water_bytes <= self.rx_fifo_bytes:
            raise UsageError(f"nic {self.name}: need 0 < fc_low_water < fc_high_water <= rx_fifo_bytes")
        if not 0 <= self.pause_quanta <= 0xFFFF:
            raise UsageError(f"nic {self.name}: pause_quanta must fit 16 bits")
        if self.tx_ring < 2 or self.rx_ring < 2:
            raise UsageError(f"nic {self.name}: rings need at least 2 descriptors")
        if min(self.internal_ns_per_byte, self.rx_service_limit, self.csr_recovery_ns,
               self.csr_read_latency_ns) < 0:
            raise UsageError(f"nic {self.name}: internal_ns_per_byte, rx_service_limit, csr_recovery_ns and "
                             "csr_read_latency_ns must not be negative")
        for f in ("tx_int_delay_us", "rx_int_delay_us", "tx_abs_int_delay_us", "rx_abs_int_delay_us"):
            if not 0 <= getattr(self, f) < 1e6:
                raise UsageError(f"nic {self.name}: {f} must be 0 (off) to under a second")

    def csr_address(self, access: str) -> tuple[bool, int]:
        """``'w:0x3818'`` -> (is_write, absolute bus address in BAR0)."""
        op, _, reg = access.partition(":")
        return op == "w", self.bar0[0] + int(reg, 0)


#: Fields of a bus profile that describe the host bridge rather than the bus, which a host may override.
BRIDGE_FIELDS = ("host_read_initial_wait_clocks", "host_write_initial_wait_clocks", "host_read_disconnect_bytes",
                 "host_write_disconnect_bytes", "host_retry_clocks")


@dataclass(frozen=True)
class HostProfile:
    """A host's software costs (stack, driver, copies, interrupt service) and its host bridge.

    ``bridge`` maps a bus profile name to the host bridge's own values of
    :data:`BRIDGE_FIELDS` on that bus (wait states, disconnect boundaries:
    a chipset property); a bus it does not name keeps the bus profile's.
    """

    name: str
    description: str
    source: str
    tx_sw_us: float
    rx_sw_us: float
    copy_ns_per_byte: float
    irq_latency_us: float
    isr_us: float
    csr_interval_ns: float
    bridge: dict[str, dict[str, int]] = field(default_factory=dict)
    #: Of ``rx_sw_us``, what the interrupt service spends per frame when a NIC's driver leaves the stack to
    #: the softirq (``rx_refill = "softirq"``): unmapping, the socket buffer, netif_rx; the rest, and the copy,
    #: runs in the softirq and the application after the service.
    rx_handler_us: float = 0.0
    #: CPU time to wake the receiving application blocked in its receive call (scheduler wake-up and context
    #: switch), paid for a datagram when no other is waiting behind it: every request and response of a
    #: round trip, never in a saturated stream. 0: not modelled (no sourced value for the hosts of Hughes-Jones et
    #: al. 2003).
    wakeup_us: float = 0.0

    def check(self) -> None:
        _check_source(self.name, self.source)
        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, float) and v < 0:
                raise UsageError(f"host {self.name}: {f.name} must not be negative")
        if self.rx_handler_us > self.rx_sw_us:
            raise UsageError(f"host {self.name}: rx_handler_us is part of rx_sw_us and cannot exceed it")
        for bus_name, values in self.bridge.items():
            unknown = sorted(set(values) - set(BRIDGE_FIELDS))
            if unknown or not all(isinstance(v, int) and v >= 0 for v in values.values()):
                raise UsageError(f"host {self.name}: bridge.{bus_name} may only set non-negative integers "
                                 f"{', '.join(BRIDGE_FIELDS)} (got {unknown or values})")

    def bus_with_bridge(self, bus: BusProfile) -> BusProfile:
        """``bus`` as this host's bridge drives it: its ``bridge`` values for that bus, if any, replace the bus's."""
        values = self.bridge.get(bus.name)
        if not values:
            return bus
        out = replace(bus, **values)
        out.check()
        return out


def _check_source(name: str, source: str) -> None:
    if not source.strip():
        raise UsageError(f"profile {name}: source must say where its numbers come from")


P = TypeVar("P", BusProfile, NicProfile, HostProfile)
_KINDS: dict[str, type] = {"bus": BusProfile, "nic": NicProfile, "host": HostProfile}


def _profile_dir(kind: str) -> Path:
    return Path(str(resources.files("nicrig.data").joinpath("profiles", kind)))


def available(kind: str) -> list[str]:
    """Names of the built-in profiles of ``kind`` (``bus``, ``nic``, ``host``)."""
    return sorted(p.stem for p in _profile_dir(kind).glob("*.toml"))


def _coerce(cls: type, raw: dict[str, Any], origin: str) -> Any:
    names = {f.name: f for f in fields(cls)}
    unknown = sorted(set(raw) - set(names))
    missing = sorted(n for n, f in names.items()
                     if n not in raw and f.default is MISSING and f.default_factory is MISSING)
    if unknown or missing:
        parts = []
        if unknown:
            parts.append(f"unknown field(s) {unknown}")
        if missing:
            parts.append(f"missing field(s) {missing}")
        raise UsageError(f"{origin}: {'; '.join(parts)}")
    values = {}
    for name, f in names.items():
        if name not in raw:
            continue
        v = raw[name]
        if f.type in ("float",) and isinstance(v, int) and not isinstance(v, bool):
            v = float(v)
        if isinstance(v, list):
            v = tuple(v)
        values[name] = v
    return cls(**values)


def load(kind: str, name_or_path: str) -> Any:
    """Load profile ``name_or_path`` of ``kind``: a built-in name or a path to a TOML file."""
    cls = _KINDS[kind]
    path = Path(name_or_path)
    if path.suffix != ".toml":
        path = _profile_dir(kind) / f"{name_or_path}.toml"
        if not path.exists():
            raise UsageError(f"unknown {kind} profile {name_or_path!r} (choose from: {', '.join(available(kind))})")
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(f"{kind} profile file {path} does not exist") from None
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{path}: not valid TOML: {exc}") from None
    profile = _coerce(cls, raw, str(path))
    profile.check()
    return profile
