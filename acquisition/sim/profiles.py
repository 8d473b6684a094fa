"""Bus, NIC and host profiles of the simulated rig, loaded from ``data/profiles/<kind>/<name>.toml``.

Every timing of the model is a profile field, so a lab can describe its own
hardware in a TOML file (pass its path instead of a name) without touching code.
Every profile names where its numbers come from in ``source`` (for the built-in
ones, the sections of Hughes-Jones et al. 2003 their values reproduce, cited as a user reads
them: "Hughes-Jones et al. 2003, §4.2.3").
"""

from __future__ import annotations

import json
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
    #: Attempts the host bridge retries (STOP#, no data) before it has the data of a read the NIC starts: a
    #: delayed transaction (PCI 2.2 3.3.3.3), its memory latency outside the transaction that moves the data.
    #: The bridge's own disconnect (its prefetch boundary) lets the master's read go on without one.
    host_read_retries: int = 0

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
        if not 0 <= self.host_read_retries <= 16:
            raise UsageError(f"bus {self.name}: host_read_retries must be 0 to 16")


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
    #: How the interrupt timers work. ``packet`` (Intel 8254x): ``*_int_delay_us`` is a packet timer restarted by
    #: every frame and ``*_abs_int_delay_us`` an absolute timer started by the first frame after an interrupt; a
    #: packet timer of 0 interrupts at once (the absolute timer is used only with a packet timer, 8254x Software
    #: Developer's Manual, RADV/TADV). ``ticks`` (Alteon Tigon II): no packet timer; ``*_abs_int_delay_us`` are the
    #: coalescing ticks from the first frame after an interrupt (0: at once), ``*_max_coal_frames`` the frames that
    #: interrupt before the ticks have run.
    int_timer: str = "packet"
    #: Frames done that interrupt at once with ``int_timer = "ticks"`` (acenic's max_tx_desc, max_rx_desc; 0: no limit).
    tx_max_coal_frames: int = 0
    rx_max_coal_frames: int = 0
    #: Receive DMA overlapping the wire (0: store and forward): the frame is moved in pieces of this many bytes, each
    #: once the wire has brought it, and its descriptor written back after the frame's end (its FCS checked). Only
    #: when the frame finds the receive DMA idle, a descriptor free and nothing waiting in the FIFO; otherwise the
    #: frame is stored first.
    rx_cut_through_bytes: int = 0
    #: The driver's receive buffer (bytes): with the socket buffer's own overhead it is what a queued datagram
    #: charges against the receiving socket's buffer (Linux's skb truesize).
    rx_buffer_bytes: int = 2048
    #: A service that loops (the e1000's non-NAPI e1000_intr, up to E1000_MAX_INTR passes): each pass walks the
    #: receive ring to the first descriptor not done, frames done during the walk included, then the transmit
    #: ring, and the service reads this cause register (the e1000's ICR) again after each pass but the last,
    #: passing again while it shows a cause latched meanwhile (a timer's expiry: the service has masked INTA#).
    #: Empty: one pass over the frames done when the service read the cause at its entry.
    isr_cause_csr: str = ""
    isr_max_passes: int = 1
    #: The service's first access masks the NIC's interrupts until its last (sk98lin: reading B0_SP_ISRC masks,
    #: writing B0_IMSK unmasks): a frame done meanwhile only latches its cause, which the service's writes for
    #: the causes it served clear when it took that frame; a cause of frames it left asserts INTA# at the unmask.
    #: A looping service (``isr_max_passes`` above 1) masks too.
    isr_masks: bool = False
    #: When the driver's send makes its register accesses (``tx_csr``): ``every`` frame (a doorbell, the e1000's tail
    #: write); or only when the NIC holds none of the ring's descriptors (``idle``: sk98lin's XmitFrame gives its
    #: start command only when the previous descriptor is no longer the NIC's, whose queue otherwise reads the next
    #: descriptor by itself).
    tx_start: str = "every"
    #: The NIC's time from a start command to the descriptor fetch of a transmit queue that was idle, beyond
    #: ``tx_fetch_latency_ns`` (ns; with ``tx_start = "idle"``: descriptors the queue reads by itself go without it).
    tx_start_latency_ns: float = 0.0
    #: CPU time (us) the driver's interrupt service spends per received frame beyond the host's ``rx_handler_us``:
    #: a driver slower than those the host's costs are fitted to (a host's ``[nic.<name>]`` table sets it).
    rx_driver_us: float = 0.0

    def check(self) -> None:
        _check_source(self.name, self.source)
        if self.rx_refill not in ("service", "softirq"):
            raise UsageError(f"nic {self.name}: rx_refill must be 'service' or 'softirq' (got {self.rx_refill!r})")
        if self.tx_start not in ("every", "idle"):
            raise UsageError(f"nic {self.name}: tx_start must be 'every' or 'idle' (got {self.tx_start!r})")
        if self.int_timer not in ("packet", "ticks"):
            raise UsageError(f"nic {self.name}: int_timer must be 'packet' or 'ticks' (got {self.int_timer!r})")
        if min(self.tx_max_coal_frames, self.rx_max_coal_frames, self.rx_cut_through_bytes) < 0 \
                or self.rx_buffer_bytes < 64:
            raise UsageError(f"nic {self.name}: *_max_coal_frames and rx_cut_through_bytes must not be negative and "
                             "rx_buffer_bytes at least 64")
        if self.isr_max_passes < 1 or (self.isr_max_passes > 1) != bool(self.isr_cause_csr) \
                or (self.isr_cause_csr and not self.isr_cause_csr.startswith("r:")):
            raise UsageError(f"nic {self.name}: a looping service needs isr_max_passes above 1 and the cause "
                             "register it reads (isr_cause_csr, 'r:...'); a single pass neither")
        for name, seq in (("tx_csr", self.tx_csr), ("isr_entry_csr", self.isr_entry_csr),
                          ("isr_exit_csr", self.isr_exit_csr), ("rx_refill_csr", self.rx_refill_csr),
                          ("isr_cause_csr", (self.isr_cause_csr,) if self.isr_cause_csr else ())):
            for access in seq:
                plain, _, cause = access.partition("@")
                op, _, reg = plain.partition(":")
                if op not in ("r", "w") or not reg:
                    raise UsageError(f"nic {self.name}: CSR access {access!r} must look like 'r:0x0008' or 'w:0x3818'")
                try:
                    offset = int(reg, 0)
                except ValueError:
                    raise UsageError(f"nic {self.name}: CSR access {access!r}: {reg!r} is no register offset") from None
                if not 0 <= offset < self.bar0[1]:
                    raise UsageError(f"nic {self.name}: register {reg} outside BAR0 (size {self.bar0[1]:#x})")
                if access != plain and (name != "isr_exit_csr" or cause not in SERVICE_CAUSES):
                    raise UsageError(f"nic {self.name}: CSR access {access!r} of {name}: a cause, '@rx' or '@tx', may "
                                     "tag only an access of isr_exit_csr")
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
               self.csr_read_latency_ns, self.tx_start_latency_ns, self.rx_driver_us) < 0:
            raise UsageError(f"nic {self.name}: internal_ns_per_byte, rx_service_limit, csr_recovery_ns, "
                             "csr_read_latency_ns, tx_start_latency_ns and rx_driver_us must not be negative")
        for f in ("tx_int_delay_us", "rx_int_delay_us", "tx_abs_int_delay_us", "rx_abs_int_delay_us"):
            if not 0 <= getattr(self, f) < 1e6:
                raise UsageError(f"nic {self.name}: {f} must be 0 (off) to under a second")

    def csr_address(self, access: str) -> tuple[bool, int]:
        """``'w:0x3818'`` -> (is_write, absolute bus address in BAR0)."""
        op, _, reg = access.partition(":")
        return op == "w", self.bar0[0] + int(reg, 0)

    def isr_exit_for(self, rx: bool, tx: bool) -> tuple[str, ...]:
        """The accesses ``isr_exit_csr`` makes at the end of a service that handled received frames (``rx``) and
        sent ones (``tx``), without their cause tags: an access tagged ``@rx`` or ``@tx`` is made only by a service
        with that cause (sk98lin's SkGeIsrOnePort writes a queue's Q_CSR only for its own cause), an untagged one
        by every service."""
        causes = {"rx": rx, "tx": tx}
        out = []
        for access in self.isr_exit_csr:
            plain, _, cause = access.partition("@")
            if not cause or causes[cause]:
                out.append(plain)
        return tuple(out)


#: The causes an access of ``isr_exit_csr`` may be tagged with (``'w:0x0434@rx'``): a service's received frames, its
#: sent ones.
SERVICE_CAUSES = ("rx", "tx")

#: The Intel PRO/1000's fields for the e1000 of 2002 (driver 4.1.7) under Linux 2.4: the ring refilled from a tasklet
#: after the stack, one tail (RDT) write a descriptor, the service ending with the unmask (IMS). The built-in profile
#: refills in the service; set these in a host's ``[nic.intel-pro1000]`` table (or a copy of the profile) to try it.
E1000_TASKLET_REFILL = {"rx_refill": "softirq", "isr_exit_csr": ("w:0x00d0",), "rx_refill_csr": ("w:0x2818",)}

#: Fields of a bus profile that describe the host bridge rather than the bus, which a host may override.
BRIDGE_FIELDS = ("host_read_initial_wait_clocks", "host_write_initial_wait_clocks", "host_read_disconnect_bytes",
                 "host_write_disconnect_bytes", "host_retry_clocks", "host_read_retries")


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
    #: Of ``rx_sw_us``, the receiving application's part per datagram (its receive call and udpmon's work); the
    #: copy to user space comes on top. What is left of ``rx_sw_us`` after ``rx_handler_us`` and this is the
    #: stack's (IP and UDP in the NET_RX softirq).
    rx_app_us: float = 0.0
    #: The receiving socket's buffer (bytes; Linux 2.4's net.core.rmem_default). A datagram whose buffer
    #: (:attr:`NicProfile.rx_buffer_bytes` + the socket buffer's overhead) does not fit is dropped and counted as
    #: UDP RcvbufErrors (InErrors in 2.4).
    rcvbuf_bytes: int = 65535
    #: Frames the NET_RX backlog holds (net.core.netdev_max_backlog); beyond it the kernel drops until it empties.
    netdev_max_backlog: int = 300
    #: Processors the kernel counts (logical CPUs): the model runs the network work (interrupts, softirq, the send
    #: call) on one and, with more than one, the receiving application on another (Linux 2.4 SMP: the softirq runs
    #: where its interrupt did, the scheduler puts the woken task on an idle processor); a CPU load is the busy
    #: time over all of them, as /proc/stat's.
    cpus: int = 1
    #: Of ``wakeup_us``, with the application on a processor of its own (``cpus`` > 1), the time that processor
    #: takes to leave its idle loop (the waker's inter-processor interrupt, the halt's exit) before it switches to
    #: the application: a delay that /proc/stat counts as idle. Unused on a uniprocessor, whose waker switches.
    wakeup_idle_us: float = 0.0
    #: Host noise per message, in standard deviations (us) of zero-mean gamma variates of shape
    #: :data:`~nicrig.acquisition.sim.noise.SHAPE` (late more than early): the interrupt entry, the scheduler's
    #: wake-up of the receiving application, and the cache state of each message's software (send and receive).
    irq_jitter_us: float = 0.0
    wakeup_jitter_us: float = 0.0
    cache_jitter_us: float = 0.0
    #: Now and then something else runs first (another process, a timer): per wake-up, this probability of an
    #: exponential delay of mean ``tail_us``: the round trips' tail.
    tail_probability: float = 0.0
    tail_us: float = 0.0
    #: A NIC driver's settings on this host (fig. 9.1's coalescence times, the driver version's behaviour): NIC
    #: profile name -> fields that replace the NIC profile's when that NIC is in this host.
    nic: dict[str, dict[str, Any]] = field(default_factory=dict)

    def check(self) -> None:
        _check_source(self.name, self.source)
        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, float) and v < 0:
                raise UsageError(f"host {self.name}: {f.name} must not be negative")
        if self.rx_handler_us + self.rx_app_us > self.rx_sw_us:
            raise UsageError(f"host {self.name}: rx_handler_us and rx_app_us are parts of rx_sw_us and cannot exceed "
                             "it together")
        if self.wakeup_idle_us > self.wakeup_us:
            raise UsageError(f"host {self.name}: wakeup_idle_us is a part of wakeup_us and cannot exceed it")
        if self.rcvbuf_bytes < 1 or self.netdev_max_backlog < 1 or self.cpus < 1:
            raise UsageError(f"host {self.name}: rcvbuf_bytes, netdev_max_backlog and cpus must be positive")
        if self.tail_probability > 1:
            raise UsageError(f"host {self.name}: tail_probability is a probability (0 to 1)")
        nic_fields = {f.name for f in fields(NicProfile)}
        for nic_name, values in self.nic.items():
            if not isinstance(values, dict):
                raise UsageError(f"host {self.name}: nic.{nic_name} must be a table of NIC profile fields")
            unknown = sorted(set(values) - set(nic_fields) | set(values) & {"name", "description", "source"})
            if unknown:
                raise UsageError(f"host {self.name}: nic.{nic_name} sets unknown or fixed field(s) {unknown}")
        for bus_name, values in self.bridge.items():
            unknown = sorted(set(values) - set(BRIDGE_FIELDS))
            if unknown or not all(isinstance(v, int) and v >= 0 for v in values.values()):
                raise UsageError(f"host {self.name}: bridge.{bus_name} may only set non-negative integers "
                                 f"{', '.join(BRIDGE_FIELDS)} (got {unknown or values})")

    def nic_with_settings(self, nic: NicProfile) -> NicProfile:
        """``nic`` as this host's driver sets it up: its ``nic`` values for that NIC, if any, replace the NIC's."""
        values = self.nic.get(nic.name)
        if not values:
            return nic
        out = replace(nic, **_coerced_values(NicProfile, values))
        out.check()
        return out

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


def raw(kind: str, name: str) -> dict[str, Any]:
    """The TOML values of built-in profile ``name`` of ``kind``, as the file has them."""
    return tomllib.loads((_profile_dir(kind) / f"{name}.toml").read_text(encoding="utf-8"))


def to_toml(values: dict[str, Any]) -> str:
    """``values`` (a profile's fields: strings, numbers, booleans, lists of them, and tables of tables of them,
    as ``bridge`` and ``nic``) as TOML that :func:`load` reads back to the same values."""
    def value(v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, (int, float)):
            return repr(v)
        if isinstance(v, str):
            return json.dumps(v)
        if isinstance(v, (list, tuple)):
            return "[" + ", ".join(value(x) for x in v) + "]"
        raise TypeError(f"no TOML for {v!r}")

    lines = [f"{k} = {value(v)}" for k, v in values.items() if not isinstance(v, dict)]
    for k, table in values.items():
        if isinstance(table, dict):
            for name, fields_ in table.items():
                lines += ["", f"[{k}.{json.dumps(name) if not name.replace('-', '').isalnum() else name}]"]
                lines += [f"{f} = {value(v)}" for f, v in fields_.items()]
    return "\n".join(lines) + "\n"


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
    return cls(**_coerced_values(cls, raw))


def _coerced_values(cls: type, raw: dict[str, Any]) -> dict[str, Any]:
    """``raw`` TOML values as ``cls``'s fields hold them: ints where floats are declared as floats, lists as tuples."""
    names = {f.name: f for f in fields(cls)}
    values = {}
    for name, v in raw.items():
        if names[name].type in ("float",) and isinstance(v, int) and not isinstance(v, bool):
            v = float(v)
        if isinstance(v, list):
            v = tuple(v)
        values[name] = v
    return values


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
