"""The rig as a discrete-event model: two hosts, their PCI buses and NICs, one full-duplex gigabit link.

The model decides *when* every bus transaction, frame and interrupt happens;
``pci_bus`` and ``gmii`` turn its output into signals. Time is SimPy time in
integer picoseconds from the start of the run. The processes run on
:class:`~nicrig.acquisition.sim.scheduler.Engine`'s :class:`Process`: one waits
``d`` ps with ``yield d`` (SimPy's ``yield env.timeout(d)``, without the event). Host A sends (stream) or
requests (latency); host B receives or responds. What each step costs is a
profile field (``data/profiles``); the mechanisms are those of Hughes-Jones et al. 2003:

* send: application + stack (``tx_sw_us`` + copy per byte), then the driver's
  CSR accesses to the NIC (``tx_csr``, host bridge as master, retried with
  STOP# for ``csr_retries`` on some NICs), then the NIC fetches the descriptor
  and the frame by DMA (bursts of ``dma_burst_bytes``) and transmits it after
  ``tx_mac_latency_ns`` (store and forward);
* wire: 8 ns per byte at 1 Gbit/s, preamble+SFD 8 bytes, gap 12 bytes (IEEE
  802.3 clause 4); MAC control PAUSE frames stop the partner's transmitter
  for ``quanta * 512`` bit times (Annex 31B);
* receive: the frame waits in the NIC's receive FIFO until a receive
  descriptor is free, is written to memory by DMA, and an interrupt is raised
  after the coalescence delay (``rx_int_delay_us``; 0 = per frame). The
  interrupt service reads the NIC's cause register (which deasserts INTA#),
  processes the frames (``rx_sw_us`` + copy each), returns the descriptors and
  re-enables interrupts; or, with a NIC's ``rx_refill = "softirq"`` (Linux
  2.4 and the e1000 of 2002), only hands them to the NET_RX softirq, which runs
  the stack after the service, and the ring is refilled once the backlog is
  empty. An application blocked in its receive call costs ``wakeup_us`` to
  wake. When the FIFO passes ``fc_high_water_bytes`` the NIC sends PAUSE;
  below ``fc_low_water_bytes`` it sends XON (PAUSE 0).
"""

from __future__ import annotations

import gc
import math
import struct
from collections import deque
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Callable, Generator, Iterable, Iterator, Literal

import numpy as np
import simpy
from nicrig.acquisition.sim import _bus
from nicrig.acquisition.sim._clock import Clock
from nicrig.acquisition.sim.ethernet import (
    Frame,
    frame_time_on_wire_ns,
    pause_frame,
    pause_time_ns,
    udp_frames,
    wire_time_ns,
)
from nicrig.acquisition.sim.gmii import CLOCK_PERIOD_PS as GMII_PERIOD_PS
from nicrig.acquisition.sim.pci_bus import (
    TURNAROUND_CLOCKS,
    PciTransaction,
    busy_clocks,
)
from nicrig.acquisition.sim.noise import HostNoise
from nicrig.acquisition.sim.profiles import BusProfile, HostProfile, NicProfile
from nicrig.acquisition.sim.scheduler import Cpu, Engine, Later, Signal, after_timeout
from nicrig.acquisition.sim.scheduler import Process as SimProcess  # this module's Process is a generator's type
from nicrig.udpmon.payload import Kind, UniformBytes, make_payload

from nicrig.errors import UsageError

PS_PER_NS = 1000
PS_PER_US = 1_000_000
#: A host's CPU serves its interrupt service first, then the NET_RX softirq, then the applications (Linux's order;
#: the model's CPU does not preempt: each waits for the piece of work in hand).
INTERRUPT, SOFTIRQ, APPLICATION = 0, 1, 2
#: What a socket buffer charges beyond the data buffer (Linux 2.4's sizeof(struct sk_buff) on i386, rounded).
SKB_OVERHEAD_BYTES = 160
#: Preamble and start-of-frame delimiter before a frame's first byte on the wire (IEEE 802.3 clause 4).
PREAMBLE_SFD_BYTES = 8
#: Where a frame's IPv4 Total Length field is (untagged: the model's frames carry no VLAN tag), the IPv4 header's
#: length (no options) and the UDP header's.
IP_TOTAL_LENGTH_AT = 14 + 2
IPV4_HEADER_BYTES = 20
UDP_HEADER_BYTES = 8
MAX_UDP_PAYLOAD = 65507
CMD_MEMORY_READ, CMD_MEMORY_WRITE, CMD_MEMORY_READ_MULTIPLE = 0x6, 0x7, 0xC
#: Transfers this long or shorter (descriptors) share their bus words with every other of the same bytes.
SHORT_TRANSFER_BYTES = 64
#: Host addresses of the transmit and the receive descriptor rings.
TX_RING_ADDRESS, RX_RING_ADDRESS = 0x0080_0000, 0x0090_0000
#: Latency: the requester waits this long after a response before its next request (us).
LATENCY_GAP_US = 10.0
#: Between two points of a schedule the rig settles (every queue empty, every interrupt served), then waits
#: this long (us): udpmon's control exchange between visits, shortened.
POINT_GAP_US = 50.0
#: How often the application looks whether the rig has settled (us).
SETTLE_POLL_US = 5.0

Process = Generator[Any, Any, Any]


#: The oldest generation's threshold while :func:`fewer_collections`: never reached (a C int).
_NO_FULL_COLLECTION = 2**31 - 1
#: The youngest generation's threshold then (net tracked allocations between collections; CPython's is 700).
_YOUNG_THRESHOLD = 1_000_000
#: How often (simulated ps) the model's run freezes what it has made (:func:`fewer_collections`).
FREEZE_EVERY_PS = 2_000_000_000


@contextmanager
def fewer_collections() -> Iterator[None]:
    """No full garbage collection (CPython's oldest generation) in the block, young ones far apart, and what
    is frozen in it (``gc.freeze``) collectable again after it; the thresholds as before after it, exceptions
    included.

    For the model's run, which builds long-lived tracked objects by the hundred thousand (bus transactions,
    frames, rows: ~33 a frame, ~600,000 at 18,000 frames) and next to no reference cycles: ~5,000 cyclic
    objects in a 3,600-frame run, nearly all Scapy's (its import, the PAUSE frames it builds). CPython
    collects the oldest generation whenever it has grown by a quarter, each time traversing the whole heap:
    seven times in an 18,000-frame run, 0.73 s of CPU, to free next to nothing. The young generations every
    700 net allocations: ~370 collections in a 6,000-frame run, each traversing survivors that nearly all
    live on; at 100,000 a handful did (2.8% fewer instructions in a 2,400-frame run of the model,
    cachegrind), and at :data:`_YOUNG_THRESHOLD` next to none come between two freezes (1.2% fewer than at
    100,000, s2400 minus s600), while short-lived cycles still go at the next collection. The run freezes what it has made every
    :data:`FREEZE_EVERY_PS` (:meth:`Rig.run`), so that collections never traverse it again. One full
    collection follows the block. Turning the collector off instead only defers the work: the first
    collections after the block then traverse everything the block allocated (measured: the same CPU in all).
    Objects the caller froze before the block are collectable after it too.
    """
    before = gc.get_threshold()
    gc.set_threshold(max(before[0], _YOUNG_THRESHOLD), before[1], _NO_FULL_COLLECTION)
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)


@dataclass(frozen=True)
class Point:
    """One visit of a run's schedule: ``count`` messages of ``size_bytes`` (a stream: ``spacing_us`` apart),
    the ``position``-th visit of round ``round`` (as :class:`nicrig.udpmon.schedule.Visit`)."""

    size_bytes: int
    count: int
    spacing_us: float = 0.0
    round: int = 0
    position: int = 0


@dataclass(frozen=True)
class Scenario:
    """What the hosts do: a spaced stream (A -> B) or request-response (A asks, B answers).

    ``schedule`` lists the points a run visits in turn (sizes and spacings in
    rounds, as ``nicrig udpmon`` measures); empty, the run is the one point
    ``size_bytes``, ``count``, ``spacing_us``. Between points the rig settles
    (:data:`POINT_GAP_US`).
    """

    kind: Literal["stream", "latency"]
    size_bytes: int
    count: int
    spacing_us: float = 0.0
    request_bytes: int = 64
    mtu: int = 1500
    start_us: float = 5.0
    seed: int = 1
    schedule: tuple[Point, ...] = ()

    def points(self) -> tuple[Point, ...]:
        return self.schedule or (Point(self.size_bytes, self.count, self.spacing_us),)

    def check(self) -> None:
        if self.kind not in ("stream", "latency"):
            raise UsageError(f"unknown scenario {self.kind!r} (choose stream or latency)")
        if not 1 <= self.request_bytes <= MAX_UDP_PAYLOAD:
            raise UsageError(f"request size {self.request_bytes} bytes: a UDP payload is 1 to {MAX_UDP_PAYLOAD} "
                             "bytes")
        for p in self.points():
            if not 1 <= p.size_bytes <= MAX_UDP_PAYLOAD:
                raise UsageError(f"size {p.size_bytes} bytes: a UDP payload is 1 to {MAX_UDP_PAYLOAD} bytes")
            if p.count < 1:
                raise UsageError(f"count {p.count}: at least one packet")
            if p.spacing_us < 0 or not math.isfinite(p.spacing_us):
                raise UsageError(f"spacing {p.spacing_us} us: must be zero or positive")
        if not 576 <= self.mtu <= 9216:
            raise UsageError(f"mtu {self.mtu}: must be 576 to 9216 bytes")


@dataclass(slots=True)
class BusRecord:
    """What happened on one host's bus: transactions (clock-scheduled) and INTA# intervals.

    Slots: ``_bus.c`` reads and writes the fields a bus claim uses at their offsets."""

    profile: BusProfile
    phase_ps: int
    transactions: list[PciTransaction] = field(default_factory=list)
    purposes: list[str] = field(default_factory=list)
    interrupts: list[list[int]] = field(default_factory=list)  # [assert_clk, deassert_clk]
    #: Where in ``transactions`` the 64-bit transfers are (AD[63:32] keeps the last one's value after it).
    wide: list[int] = field(default_factory=list)
    free_clk: int = 0
    period_ps: float = field(init=False, repr=False)
    arbitration_clocks: int = field(init=False, repr=False)
    #: The bus's clock (its edges' times, one at a time or a range at once).
    clock: Clock = field(init=False, repr=False, compare=False)
    #: The first rising edge at or after a time (ps, int or float): exactly the inverse of :attr:`time_of`.
    clock_at_or_after: Callable[[float], int] = field(init=False, repr=False, compare=False)
    #: The time (ps) of a rising edge: ``phase_ps + round(clk * period_ps)``.
    time_of: Callable[[int], int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.period_ps = self.profile.period_ps
        self.arbitration_clocks = self.profile.arbitration_clocks
        # The model asks these ~34 times a frame: _clock.c does Python's float arithmetic at C's cost.
        self.clock = Clock(self.phase_ps, self.period_ps)
        self.clock_at_or_after, self.time_of = self.clock.at_or_after, self.clock.time_of


@dataclass
class RigRun:
    """Everything the model produced, in picoseconds from the start of the run."""

    buses: dict[str, BusRecord]
    probe_tx: list[tuple[int, Frame]]  # (start clock on the 125 MHz probe grid, frame) A -> B
    probe_rx: list[tuple[int, Frame]]  # B -> A, as seen at A's GMII
    probe_phase_ps: int
    packets: list[tuple]  # rows of PACKET_DTYPE
    interrupts: list[tuple]  # rows of INTERRUPT_DTYPE
    counters: dict[str, int]
    trigger_ps: int
    end_ps: int
    #: Per host (``send``, ``recv``): its CPU's busy intervals (ps, shape (n, 2)), and how many processors its
    #: kernel counts (a load is the busy time over all of them).
    cpu_busy: dict[str, np.ndarray] = field(default_factory=dict)
    cpus: dict[str, int] = field(default_factory=dict)
    #: Per host: the sequence numbers of the messages its kernel dropped (socket buffer full, backlog throttled,
    #: a datagram never reassembled), in order.
    dropped: dict[str, list[int]] = field(default_factory=dict)
    #: Per host: each message its socket queued, by sequence number, with the kernel's receive time stamp (ps):
    #: when its last frame went through netif_rx, which stamps a buffer in Linux 2.4 (SO_TIMESTAMP's time).
    stamps: dict[str, dict[int, int]] = field(default_factory=dict)

    @property
    def probe_clock(self) -> Clock:
        """The probe's 125 MHz clock (its edges at ``probe_phase_ps`` + k x 8 ns)."""
        return Clock(self.probe_phase_ps, GMII_PERIOD_PS)


PACKET_DTYPE = np.dtype([
    ("seq", "<i8"), ("kind", "S8"), ("size_bytes", "<i8"), ("frames", "<i8"),
    ("t_app_send_ps", "<i8"), ("t_wire_start_ps", "<i8"), ("t_app_recv_ps", "<i8"), ("point", "<i4"),
])
INTERRUPT_DTYPE = np.dtype([
    ("host", "S8"), ("t_assert_ps", "<i8"), ("t_deassert_ps", "<i8"),
    ("rx_frames", "<i8"), ("tx_frames", "<i8"),
])


def _dma_spans(address: int, length: int, nic_burst: int, host_cut: int) -> list[tuple[int, int, bool]]:
    """Split a DMA of ``length`` bytes at ``address`` into bus transactions: (byte offset into the transfer,
    bytes, ended by the NIC itself).

    A transaction ends at the NIC's burst limit or the end of the data (normal
    completion), or earlier where the host bridge disconnects at a multiple of
    ``host_cut`` bytes of address (PCI 3.0 3.3.3.2.1, disconnect with data).
    """
    out = []
    end = address + length
    burst_start = pos = address
    while pos < end:
        burst_end = min(burst_start + nic_burst, end)
        cut = min(burst_end, (pos // host_cut + 1) * host_cut)
        out.append((pos - address, cut - pos, cut == burst_end))
        pos = cut
        if cut == burst_end:
            burst_start = cut
    return out


#: A 64-bit bus's words as read from memory (little-endian), and whether that is this machine's uint64.
_WORDS64 = np.dtype("<u8")
_WORDS64_NATIVE = _WORDS64 == np.dtype(np.uint64)
_WORDS32 = np.dtype("<u4")


def bus_words(payload: bytes, width: int) -> np.ndarray:
    """``payload`` as data phases of a ``width``-byte bus (little-endian, the last one zero-padded), uint64;
    read-only on a 64-bit bus of a little-endian machine (the bytes' own buffer, not a copy: one NumPy call,
    made ~5 times a simulated frame)."""
    n = max(1, -(-len(payload) // width))
    padded = payload.ljust(n * width, b"\0")
    if width == 8 and _WORDS64_NATIVE:
        return np.frombuffer(padded, _WORDS64)
    return np.frombuffer(padded, _WORDS64 if width == 8 else _WORDS32).astype(np.uint64)


def byte_enables(length: int, width: int) -> np.ndarray:
    """Byte enables (active high) of the data phases that carry ``length`` bytes on a ``width``-byte bus."""
    n = max(1, -(-length // width))
    be = np.full(n, (1 << width) - 1, dtype=np.uint8)
    tail = length - (n - 1) * width
    if tail < width:
        be[-1] = (1 << tail) - 1
    return be


def _frozen(a: np.ndarray) -> np.ndarray:
    """``a``, read-only: shared by every transaction of one shape, so nothing may change it in place."""
    a.flags.writeable = False
    return a


@dataclass(frozen=True, slots=True)
class DmaBurst:
    """One bus transaction of a DMA, all but its data: ``offset`` and ``length`` (bytes) within the
    transfer, command, per-phase byte enables and wait states (clocks), termination, and the clocks it keeps
    the bus busy (:func:`busy_clocks`) with a single or a dual address cycle (PCI 3.0 3.9). ``phases``: its
    data phases among the transfer's when the transfer starts on a bus word."""

    offset: int
    length: int
    phases: slice
    command: int
    byte_enables: np.ndarray
    target_waits: np.ndarray
    master_waits: np.ndarray
    termination: str
    busy: int
    busy_dac: int


@lru_cache(maxsize=1024)
def dma_plan(length: int, address_mod_cut: int, *, write: bool, width_bits: int, nic_burst: int, host_cut: int,
             initial_wait: int, master_wait_every: int, read_retries: int = 0) -> tuple[DmaBurst, ...]:
    """The bus transactions of a NIC-mastered DMA of ``length`` bytes starting ``address_mod_cut`` bytes past
    a multiple of ``host_cut`` (where the host bridge disconnects, PCI 3.0 3.3.3.2.1).

    The host bridge as target inserts ``initial_wait`` clocks before the first data phase (memory latency
    or its posting buffer); on writes the NIC inserts one master wait state every ``master_wait_every``
    phases (0: none). A read the NIC starts (the DMA's first, or one after a burst the NIC ended itself)
    is retried ``read_retries`` times first, a delayed transaction while the bridge fetches its data
    (PCI 2.2 3.3.3.3); after the bridge's own disconnect the read goes on without. A DMA repeats a few
    shapes endlessly (descriptors, frames of one size), so plans are memoized: only the data differ from
    one transfer to the next.
    """
    width = width_bits // 8
    plan = []
    nic_started = True
    for offset, nbytes, nic_end in _dma_spans(address_mod_cut, length, nic_burst, host_cut):
        be = byte_enables(nbytes, width)
        cmd = CMD_MEMORY_WRITE if write else (CMD_MEMORY_READ_MULTIPLE if len(be) > 2 else CMD_MEMORY_READ)
        if not write and nic_started:
            plan.extend([_retried_read(offset, width_bits, cmd, int(be[0]))] * read_retries)
        nic_started = nic_end
        tw = np.zeros(len(be), dtype=np.int64)
        tw[0] = initial_wait
        mw = np.zeros(len(be), dtype=np.int64)
        if write and master_wait_every:
            mw[master_wait_every::master_wait_every] = 1
        plan.append(_burst(offset, nbytes, width_bits, PciTransaction(
            start_clk=0, command=cmd, address=0, data=np.zeros(len(be), np.uint64), byte_enables=be, target_waits=tw,
            master_waits=mw, devsel=2, wide=width_bits == 64, master="nic", kind="dma",
            termination="normal" if nic_end else "disconnect_with_data")))
    return tuple(plan)


def _burst(offset: int, length: int, width_bits: int, shape: PciTransaction) -> DmaBurst:
    """``shape`` (a NIC transaction at address 0, its data zero) as the burst of ``length`` bytes at ``offset``
    bytes into its transfer: its arrays made read-only, the clocks it keeps the bus busy counted with a single and
    with a dual address cycle."""
    busy = busy_clocks(shape, width_bits)
    shape.address = 1 << 32
    first = offset // (width_bits // 8)
    return DmaBurst(offset, length, slice(first, first + len(shape.byte_enables)), shape.command,
                    _frozen(shape.byte_enables), _frozen(shape.target_waits), _frozen(shape.master_waits),
                    shape.termination, busy, busy_clocks(shape, width_bits))


def _retried_read(offset: int, width_bits: int, command: int, first_byte_enables: int) -> DmaBurst:
    """A NIC's read attempt at ``offset`` bytes into its transfer that the host bridge answers with STOP# and
    no data (retry): its one data phase not taken, the master to repeat the read with the same address,
    command and byte enables (PCI 2.2 3.3.3.3.1), which the attempt therefore carries."""
    return _burst(offset, width_bits // 8, width_bits, PciTransaction(
        start_clk=0, command=command, address=0, data=np.zeros(1, np.uint64),
        byte_enables=np.array([first_byte_enables], dtype=np.uint8), target_waits=np.zeros(1, dtype=np.int64),
        master_waits=np.zeros(1, dtype=np.int64), devsel=2, wide=width_bits == 64, master="nic", kind="dma",
        termination="retry"))


@dataclass(frozen=True, slots=True)
class CsrAccess:
    """A driver's access to one NIC register as the host bridge puts it on the bus: ``template`` (start clock
    and termination to fill in; read-only arrays) and its busy clocks completed or retried (STOP#). Each
    attempt (``_bus.c``) is a fresh transaction of the template's fields, its arrays shared."""

    is_write: bool
    template: PciTransaction
    busy: int
    busy_retry: int


# _bus.c's DMA bursts, register accesses and bus claims read and write these classes' slots at their offsets.
_bus.bind(BusRecord, DmaBurst, CsrAccess, PciTransaction, Engine, SimProcess, Later, TURNAROUND_CLOCKS)


class Link:
    """One direction of the full-duplex link: a MAC transmitter with PAUSE handling (802.3 Annex 31B)."""

    def __init__(self, env: Engine, rig: Rig, name: str, probe: list[tuple[int, Frame]]):
        self.env, self.rig, self.name, self.probe = env, rig, name, probe
        self.control: deque[Frame] = deque()
        self.data: deque[tuple[Frame, Callable[[], None]]] = deque()
        self.kick = Signal(env)
        self.free_ps = 0
        self.paused_until = 0
        self.pause_changed = Signal(env)
        self.deliver: Callable[[Frame], None] = lambda f: None
        #: Told when a frame's first byte reaches the far NIC (its preamble's start, ps), for a NIC that cuts
        #: through; None: nobody listens.
        self.first_byte: Callable[[Frame, int], None] | None = None
        env.process(self._run())

    def send_control(self, frame: Frame) -> None:
        self.control.append(frame)
        self.kick.notify()

    def send_data(self, frame: Frame, done: Callable[[], None]) -> None:
        self.data.append((frame, done))
        self.kick.notify()

    def pause(self, quanta: int) -> None:
        """A PAUSE from the partner arrived: stop sending data for ``quanta`` x 512 bit times (0 resumes)."""
        self.paused_until = self.env.now + self.rig.ps(pause_time_ns(quanta, self.rig.link_rate_bps))
        self.pause_changed.notify()

    def _run(self) -> Process:
        env = self.env
        while True:
            if not self.control and not self.data:
                yield self.kick
                continue
            if not self.control and env.now < self.paused_until:
                yield env.timeout(self.paused_until - env.now) | self.pause_changed.wait() | self.kick.wait()
                continue
            frame, done = (self.control.popleft(), None) if self.control else self.data.popleft()
            clk = self.rig.probe_clock.at_or_after(max(env.now, self.free_ps))
            start = self.rig.probe_clock.time_of(clk)
            self.probe.append((clk, frame))
            if self.first_byte is not None:
                at_ps = start + self.rig.phy_latency_ps
                after_timeout(env, lambda at_ps=at_ps: at_ps - env.now,
                              lambda frame=frame, at_ps=at_ps: self.first_byte(frame, at_ps))
            on_wire_ps = self.rig.ps(frame_time_on_wire_ns(len(frame.data), self.rig.link_rate_bps))
            self.free_ps = start + self.rig.ps(wire_time_ns(len(frame.data), self.rig.link_rate_bps))
            yield start + on_wire_ps - env.now
            if done is not None:
                done()
            at_ps = env.now + self.rig.phy_latency_ps
            after_timeout(env, lambda at_ps=at_ps: at_ps - env.now, lambda frame=frame: self.deliver(frame))


class Host:
    """One host: CPU, driver, NIC (DMA engines, FIFOs, interrupt logic) on its bus."""

    def __init__(self, env: Engine, rig: Rig, name: str, bus: BusRecord,
                 nic: NicProfile, host: HostProfile, tx_link: Link, mac: str, ip: str, noise: HostNoise):
        self.env, self.rig, self.name, self.bus = env, rig, name, bus
        self.nic, self.hp, self.tx_link = nic, host, tx_link
        self.mac, self.ip = mac, ip
        self.noise = noise
        self.cpu = Cpu(env)
        # Linux 2.4 SMP: the NIC's interrupt and the NET_RX softirq it raises run on the processor the interrupt
        # goes to, and the scheduler runs the woken receiving application on another one that is idle. The send
        # call stays on the first: all of a host's register accesses come from one processor, in turn (two
        # processors' would interleave on the bus, which the bus analysis does not tell apart).
        self.app_cpu = Cpu(env) if host.cpus > 1 else self.cpu
        self.posted: deque[tuple[CsrAccess, Callable[[], None] | None]] = deque()
        self.posted_kick = Signal(env)
        self.posted_idle = Signal(env)
        self.csr_ready_ps = 0
        self._csr_shapes: dict[str, CsrAccess] = {}
        # The service's closing accesses by its causes (received frames, sent ones): a queue's register is written
        # only by a service with that queue's cause, where the profile tags it so.
        self.isr_exit = {(rx, tx): nic.isr_exit_for(rx, tx) for rx in (False, True) for tx in (False, True)}
        # The profiles' durations in model time, worked out once (each is asked for per frame or per burst).
        p = bus.profile
        self.bus_bytes, self.bus_wide = p.bytes_per_clock, p.width_bits == 64
        self.dma_burst_gap_ps = round(nic.dma_burst_gap_clocks * p.period_ps)
        self.host_retry_ps = round(p.host_retry_clocks * p.period_ps)
        self.csr_interval_ps = round(host.csr_interval_ns * PS_PER_NS)
        self.csr_read_latency_ps = round(nic.csr_read_latency_ns * PS_PER_NS)
        self.csr_recovery_ps = round(nic.csr_recovery_ns * PS_PER_NS)
        self.irq_latency_ps = round(host.irq_latency_us * PS_PER_US)
        self.isr_ps = round(host.isr_us * PS_PER_US)
        self.rx_handler_ps = round((host.rx_handler_us + nic.rx_driver_us) * PS_PER_US)
        self.tx_fetch_latency_ps = round(nic.tx_fetch_latency_ns * PS_PER_NS)
        self.tx_start_latency_ps = round(nic.tx_start_latency_ns * PS_PER_NS)
        self.tx_mac_latency_ps = round(nic.tx_mac_latency_ns * PS_PER_NS)
        self.rx_mac_latency_ps = round(nic.rx_mac_latency_ns * PS_PER_NS)
        self.wakeup_ps = round(host.wakeup_us * PS_PER_US)
        self.wakeup_idle_ps = round(host.wakeup_idle_us * PS_PER_US) if self.app_cpu is not self.cpu else 0
        self.tx_sw_ps = round(host.tx_sw_us * PS_PER_US)
        self.rx_stack_ps = round((host.rx_sw_us - host.rx_handler_us - host.rx_app_us) * PS_PER_US)
        self.rx_app_ps = round(host.rx_app_us * PS_PER_US)
        self.copy_ps_per_byte = host.copy_ns_per_byte * PS_PER_NS
        # What shapes this host's DMA (:func:`dma_plan`'s keywords), reads and writes; and the plans of its DMAs
        # by (write, length, address past the host bridge's boundary): a handful, asked for per frame.
        self.dma_shapes = {write: dict(
            width_bits=p.width_bits,
            nic_burst=nic.dma_read_burst_bytes if not write and nic.dma_read_burst_bytes else nic.dma_burst_bytes,
            host_cut=p.host_write_disconnect_bytes if write else p.host_read_disconnect_bytes,
            initial_wait=p.host_write_initial_wait_clocks if write else p.host_read_initial_wait_clocks,
            master_wait_every=nic.rx_dma_master_wait_every,
            read_retries=0 if write else p.host_read_retries) for write in (False, True)}
        self.dma_plans: dict[tuple[bool, int, int], tuple[DmaBurst, ...]] = {}
        #: The bus words of the short transfers (descriptors), by their bytes: a ring's few, again and again.
        self.short_words: dict[bytes, np.ndarray] = {}
        # Per cause, the packet and the absolute coalescence timers (ps; None: that timer is off), and how many frames
        # interrupt at once (0: no limit). An 8254x packet timer of 0 interrupts at once, its absolute timer unused; a
        # Tigon has no packet timer, only its coalescing ticks.
        ticks = nic.int_timer == "ticks"
        self.int_delays_ps = {cause: (None if ticks else round(packet * PS_PER_US) if packet else None,
                                      round(absolute * PS_PER_US) if absolute and (ticks or packet) else None)
                              for cause, packet, absolute in (("tx", nic.tx_int_delay_us, nic.tx_abs_int_delay_us),
                                                              ("rx", nic.rx_int_delay_us, nic.rx_abs_int_delay_us))}
        self.int_max_frames = {"tx": nic.tx_max_coal_frames if ticks else 0,
                               "rx": nic.rx_max_coal_frames if ticks else 0}
        self.int_frames = {"tx": 0, "rx": 0}
        # transmit side
        self.tx_slots = nic.tx_ring
        self.tx_slot_freed = Signal(env)
        # Frames handed to the NIC, each with whether the driver started the queue for it (a start command).
        self.tx_doorbell: deque[tuple[Frame, bool]] = deque()
        self.tx_kick = Signal(env)
        self.tx_fifo_used = 0
        self.tx_fifo_freed = Signal(env)
        self.tx_completed = 0
        # Descriptors handed to the NIC and not yet written back: while it holds one, an ``idle`` start needs no access.
        self.tx_owned = 0
        self.tx_start_every = nic.tx_start == "every"
        self.tx_next_slot = 0
        # the previous frame's hand-off to the MAC: frames leave in ring order
        self.tx_handed: simpy.Event | None = None
        # receive side
        self.rx_fifo_used = 0
        self.rx_pending: deque[Frame] = deque()
        self.rx_kick = Signal(env)
        self.rx_desc_free = nic.rx_ring
        self.rx_desc_freed = Signal(env)
        self.rx_done: deque[Frame] = deque()
        self.rx_next_slot = 0
        self.xoff_until = -1
        # Frames the interrupt service handed to the stack (Linux 2.4's per-CPU backlog, netif_rx; dropped while it
        # is throttled, from full until empty), and the descriptors it took off the ring that wait for the refill,
        # with a ``softirq`` refill.
        self.backlog: deque[tuple[Frame, int]] = deque()
        self.backlog_kick = Signal(env)
        self.backlog_throttled = False
        self.rx_cleaned = 0
        # Receive cut-through: the frame whose DMA follows the wire (None: none), when its first byte came, whether
        # its end has; whether the receive DMA is moving a frame.
        self.cut_frame: Frame | None = None
        self.cut_first_ps = 0
        self.cut_ended = False
        self.cut_end = Signal(env)
        self.rx_dma_busy = False
        self.wire_ps_per_byte = 8e12 / rig.link_rate_bps
        # IP reassembly (per IP id: payload bytes so far, fragments) and the receiving socket: datagrams (the last
        # fragment's frame, payload bytes, buffer charged), the bytes they charge against the socket's buffer.
        self.reassembly: dict[int, list[int]] = {}
        self.socket: deque[tuple[Frame, int, int]] = deque()
        self.socket_bytes = 0
        self.socket_ready = Signal(env)
        self.app_idle = True
        self.rx_truesize = nic.rx_buffer_bytes + SKB_OVERHEAD_BYTES
        # interrupts
        self.int_asserted = False
        # The looping service has masked INTA# (e1000: IMC) until it unmasks (IMS) at its end.
        self.int_masked = False
        self.int_timer_due: int | None = None
        # Per cause (tx, rx): the packet timer's and the absolute timer's due times (ps), None when idle.
        self.int_timers: dict[str, list[int | None]] = {"tx": [None, None], "rx": [None, None]}
        self.int_event = Signal(env)
        self._row = -1
        self.on_receive: Callable[[Frame, int], None] = lambda f, t: None
        self.counters = {"rx_fifo_overflow": 0, "pause_sent": 0, "xon_sent": 0, "interrupts": 0,
                         "udp_in_datagrams": 0, "udp_rcvbuf_errors": 0, "softnet_dropped": 0, "reasm_fails": 0}
        #: The sequence numbers of the messages this host's kernel dropped, in order, and the receive stamps (ps) of
        #: those its socket queued.
        self.dropped: list[int] = []
        self.stamps: dict[int, int] = {}
        env.process(self._poster())
        env.process(self._nic_tx())
        env.process(self._nic_rx_dma())
        env.process(self._isr_loop())
        env.process(self._softirq())
        env.process(self._application())

    def busy_intervals(self) -> np.ndarray:
        """When this host's processors were busy (ps, shape (n, 2)): the network's, then the application's if it
        has one of its own (a load sums them, as /proc/stat's jiffies)."""
        cpus = (self.cpu,) if self.app_cpu is self.cpu else (self.cpu, self.app_cpu)
        return np.concatenate([np.array(c.busy[:len(c.busy) // 2 * 2], dtype=np.int64).reshape(-1, 2) for c in cpus])

    def settled(self) -> bool:
        """Nothing in flight: no register write posted, every frame sent and received, its descriptors returned
        and its interrupt served, the CPU free."""
        return (not self.posted and not self.tx_doorbell and self.tx_fifo_used == 0
                and self.tx_slots == self.nic.tx_ring and not self.rx_pending and not self.rx_done
                and self.rx_desc_free == self.nic.rx_ring and not self.backlog and not self.rx_cleaned
                and not self.socket and self.app_idle and self.cut_frame is None
                and not self.int_asserted and self.int_timer_due is None
                and self.cpu.count == 0 and self.app_cpu.count == 0
                and not self.tx_link.data and not self.tx_link.control and self.tx_link.free_ps <= self.env.now)

    # -- bus ------------------------------------------------------------------------------
    def _csr_transaction(self, shape: CsrAccess) -> Later:
        """One register access on the bus (host bridge is master), after its STOP# retries, started now: its end,
        which the calling process waits for and then tells :meth:`_csr_done` (a plain call, not a generator: the
        ~5 accesses a simulated message each made one and resumed through it).

        A NIC refuses (retries, PCI 3.0 3.3.3.2.2) a write ``csr_retries``
        times, and any access that arrives within ``csr_recovery_ns`` of the
        end of its previous one: Hughes-Jones et al. 2003, §6.1.3/§6.2.3, on the faster
        P4DP6 "the CPU/motherboard can present the next command to the NIC
        faster than the NIC can accept them". A read whose data takes the NIC
        ``csr_read_latency_ns`` is a delayed transaction (3.3.3.3): retried
        until the data is there, since a target may not hold the bus past 16
        clocks (3.5.1.1). ``shape``: the access (:meth:`_csr_shape`).
        """
        # Each attempt and the host bridge's wait after a refused one are queued calls (_bus.c) at the moments
        # this process's waits for them were, so SimPy's order of events is kept without a step of it each.
        return _bus.register_access(self.env, self.bus, self, shape, self.nic.csr_retries if shape.is_write else 0,
                                    not shape.is_write and bool(self.nic.csr_read_latency_ns),
                                    self.csr_read_latency_ps, self.host_retry_ps)

    def _csr_done(self) -> None:
        """A register access has just completed: the NIC refuses the next for ``csr_recovery_ns``."""
        if self.nic.csr_recovery_ns:
            self.csr_ready_ps = self.env.now + self.csr_recovery_ps

    def _csr_shape(self, access: str) -> CsrAccess:
        """What every access ``access`` (``'w:0x3818'``) puts on the bus, worked out once per register."""
        shape = self._csr_shapes.get(access)
        if shape is None:
            is_write, addr = self.nic.csr_address(access)
            txn = PciTransaction(
                start_clk=0, command=CMD_MEMORY_WRITE if is_write else CMD_MEMORY_READ, address=addr,
                data=_frozen(np.array([addr & 0xFFFF], dtype=np.uint64)),
                byte_enables=_frozen(np.array([0xF], dtype=np.uint8)),
                target_waits=_frozen(np.array([self.nic.csr_write_target_waits if is_write
                                               else self.nic.csr_read_target_waits])),
                devsel=self.nic.devsel, master="host", kind="csr")
            width = self.bus.profile.width_bits
            busy = busy_clocks(txn, width)
            txn.termination = "retry"
            shape = self._csr_shapes[access] = CsrAccess(is_write, txn, busy, busy_clocks(txn, width))
        return shape

    def _poster(self) -> Process:
        """The host bridge's posted-write queue: CPU writes reach the bus in order, while the CPU goes on."""
        while True:
            if not self.posted:
                self.posted_idle.notify()
                yield self.posted_kick
                continue
            shape, done = self.posted[0]
            yield self._csr_transaction(shape)
            self._csr_done()
            self.posted.popleft()
            if done is not None:
                done()

    def csr(self, access: str, done: Callable[[], None] | None = None) -> Iterable[Any]:
        """A driver access to a NIC register, for the calling process to ``yield from``; ``done`` runs when it
        has completed on the bus.

        Memory writes are posted (PCI 3.0 section 3.3.3.3): the CPU continues at once, so a write is queued
        here and nothing is left to wait for (no generator: most accesses are writes).
        A read waits for the posted writes ahead of it, then for its own data (:meth:`csr_sequence`).
        """
        shape = self._csr_shape(access)
        if shape.is_write:
            self._post(shape, done)
            return ()
        return self.csr_sequence((access,), done)

    def _post(self, shape: CsrAccess, done: Callable[[], None] | None) -> None:
        """Queue a posted register write for the bridge to put on the bus; ``done`` when it has."""
        self.posted.append((shape, done))
        self.posted_kick.notify()

    def csr_sequence(self, accesses: tuple[str, ...], on_first: Callable[[], None] | None = None) -> Process:
        """The CPU's register accesses, ``csr_interval_ns`` apart; ``on_first`` when the first completes.

        A read is waited for here rather than in a generator of its own, which every resume of the waiting
        process would pass through: first the posted writes ahead of it, then its transaction's end.
        """
        done = on_first
        for i, access in enumerate(accesses):
            if i:
                done = None
                yield self.csr_interval_ps
            shape = self._csr_shape(access)
            if shape.is_write:
                self._post(shape, done)
                continue
            while self.posted:
                yield self.posted_idle
            yield self._csr_transaction(shape)
            self._csr_done()
            if done is not None:
                done()

    def dma(self, write: bool, address: int, payload: bytes, purpose: str) -> Later:
        """NIC-mastered memory transfer, host bridge as target, started now: its end, which the calling process
        waits for (``yield host.dma(...)``; a plain call, not a generator: ~5 a simulated frame).

        The NIC bursts up to ``dma_burst_bytes``; the host bridge disconnects a
        burst (STOP# with TRDY#) where it crosses its prefetch/posting boundary,
        and the NIC re-arbitrates for the rest (:func:`dma_plan`).
        """
        if not payload:
            raise ValueError(f"a {purpose} DMA of no bytes: a PCI transaction has at least one data phase")
        shape = self.dma_shapes[write]
        key = (write, len(payload), address % shape["host_cut"])
        plan = self.dma_plans.get(key)
        if plan is None:
            plan = self.dma_plans[key] = dma_plan(key[1], key[2], write=write, **shape)
        # Aligned (the usual case: buffers and descriptors are), every burst starts on a bus word, so its data
        # phases are a slice of the whole transfer's.
        width = self.bus_bytes
        if address % width:
            data = tuple(bus_words(payload[b.offset:b.offset + b.length], width) for b in plan)
        elif len(payload) <= SHORT_TRANSFER_BYTES:
            data = self.short_words.get(payload)
            if data is None:
                data = self.short_words[payload] = _frozen(bus_words(payload, width))
        else:
            data = bus_words(payload, width)
        # Each burst claims the bus when it is free, and the NIC its gap after each but the last, as queued
        # calls (_bus.c), at the moments a process waiting for each would have been: SimPy's order of events
        # (equal times by creation) is kept, with no event or generator a burst.
        return _bus.bursts(self.env, self.bus, plan, address, data, purpose, self.dma_burst_gap_ps, self.bus_wide)

    def descriptor_address(self, ring: int, slot: int) -> int:
        """Where descriptor ``slot`` of the ring at ``ring`` lies: the ring is an array of the NIC's descriptors, so a
        32-byte descriptor (SK-9843, Tigon) never straddles a host bridge's 128-byte prefetch or posting boundary."""
        return ring + slot * self.nic.descriptor_bytes

    def descriptor(self, buffer_addr: int, length: int, status: int) -> bytes:
        """A legacy-layout descriptor: buffer address, length, command/status (e1000 style)."""
        body = struct.pack("<QHBBBBH", buffer_addr, length, 0, 0x0B, status, 0, 0)
        return body.ljust(self.nic.descriptor_bytes, b"\0")

    # -- send path ------------------------------------------------------------------------
    def send_message(self, payload: bytes, dst: Host, ip_id: int) -> Process:
        """Application sends one UDP message: software, then per frame a ring slot and the CSR setup."""
        frames = udp_frames(payload, src_mac=self.mac, dst_mac=dst.mac, src_ip=self.ip, dst_ip=dst.ip,
                            sport=5001, dport=5001, ip_id=ip_id, mtu=self.rig.scenario.mtu)
        with self.cpu.request(priority=APPLICATION) as req:
            yield req
            yield max(0, self.tx_sw_ps + round(self.copy_ps_per_byte * len(payload)) + self.noise.cache())
        for frame in frames:
            # Ring full: the driver stops the queue and the sender blocks, off the CPU.
            while self.tx_slots == 0:
                yield self.tx_slot_freed
            self.tx_slots -= 1
            started = self.tx_start_every or not self.tx_owned
            if started:
                with self.cpu.request(priority=APPLICATION) as req:
                    yield req
                    yield from self.csr_sequence(self.nic.tx_csr)
            self.tx_owned += 1
            self.tx_doorbell.append((frame, started))
            self.tx_kick.notify()
        return frames

    def _nic_tx(self) -> Process:
        env = self.env
        while True:
            if not self.tx_doorbell:
                yield self.tx_kick
                continue
            frame, started = self.tx_doorbell.popleft()
            while self.tx_fifo_used + len(frame.data) > self.nic.tx_fifo_bytes:
                yield self.tx_fifo_freed
            yield self.tx_fetch_latency_ps + (self.tx_start_latency_ps if started else 0)
            slot = self.tx_next_slot % self.nic.tx_ring
            self.tx_next_slot += 1
            buf = 0x0100_0000 + slot * 0x800
            yield self.dma(False, self.descriptor_address(TX_RING_ADDRESS, slot),
                           self.descriptor(buf, len(frame.data) - 4, 0), "tx_desc_fetch")
            self.tx_fifo_used += len(frame.data)
            moved_by = env.now + self.internal_move_ps(len(frame.data) - 4)
            yield self.dma(False, buf, frame.data[:-4], "tx_data")
            before, self.tx_handed = self.tx_handed, env.event()
            env.process(self._transmit(frame, slot, buf, moved_by, before, self.tx_handed))

    def internal_move_ps(self, nbytes: int) -> int:
        """Time the NIC's own data path takes to move ``nbytes`` between its bus FIFO and its packet memory.

        It runs alongside the DMA, so only where it is slower than the bus
        does it show: the SK-9843 on 64/66 PCI (Hughes-Jones et al. 2003, §4.1.1), whose transfers
        run without wait states yet whose latency grows by ~0.023 us a byte
        ("some movement of data within the hardware interface itself").
        """
        return round(nbytes * self.nic.internal_ns_per_byte * PS_PER_NS)

    def _transmit(self, frame: Frame, slot: int, buf: int, moved_by: int, before: simpy.Event | None,
                  handed: simpy.Event) -> Process:
        """Send a fetched frame once the NIC's data path has moved it, after the frame fetched before it: a
        NIC transmits its ring in order (a short frame never overtakes a long one still being moved)."""
        yield max(0, moved_by - self.env.now) + self.tx_mac_latency_ps
        if before is not None:
            yield before
        handed.succeed()
        sent = self.env.event()
        self.tx_link.send_data(frame, sent.succeed)
        yield sent
        self.tx_fifo_used -= len(frame.data)
        self.tx_fifo_freed.notify()
        yield self.dma(True, self.descriptor_address(TX_RING_ADDRESS, slot),
                       self.descriptor(buf, len(frame.data) - 4, 1), "tx_desc_writeback")
        self.tx_completed += 1
        self.tx_owned -= 1
        self.raise_interrupt("tx")

    # -- receive path ---------------------------------------------------------------------
    def receive_start(self, frame: Frame, first_ps: int) -> None:
        """A frame's first byte (its preamble) reached the NIC at ``first_ps``: a NIC that cuts through
        (``rx_cut_through_bytes``) DMAs it as it arrives when its receive DMA is idle, nothing waits in its FIFO and a
        descriptor is free; otherwise the frame is stored first (:meth:`receive_frame`)."""
        if (frame.kind == "pause" or self.rx_dma_busy or self.rx_pending or not self.rx_desc_free
                or self.cut_frame is not None):
            return
        self.cut_frame = frame
        self.cut_first_ps = first_ps
        self.cut_ended = False
        self.rx_kick.notify()

    def receive_frame(self, frame: Frame) -> None:
        """A frame has fully arrived at the NIC (store and forward; cut through: its FCS is in)."""
        if frame.kind == "pause":
            self.tx_link.pause(frame.pause_quanta)
            return
        if frame is self.cut_frame:
            self.cut_ended = True
            self.cut_end.notify()
            return
        size = len(frame.data)
        if self.rx_fifo_used + size > self.nic.rx_fifo_bytes:
            self.counters["rx_fifo_overflow"] += 1
            return
        self.rx_fifo_used += size
        self.rx_pending.append(frame)
        if (self.nic.flow_control and self.rx_fifo_used >= self.nic.fc_high_water_bytes
                and self.env.now >= self.xoff_until):
            self.xoff_until = self.env.now + self.rig.ps(pause_time_ns(self.nic.pause_quanta,
                                                                        self.rig.link_rate_bps)) // 2
            self.counters["pause_sent"] += 1
            self.tx_link.send_control(pause_frame(self.mac, self.nic.pause_quanta))
        self.rx_kick.notify()

    def _nic_rx_dma(self) -> Process:
        env = self.env
        while True:
            if self.cut_frame is not None:
                self.rx_dma_busy = True
                yield from self._cut_through()
                self.rx_dma_busy = False
                continue
            if not self.rx_pending:
                yield self.rx_kick
                continue
            self.rx_dma_busy = True
            while self.rx_desc_free == 0:
                yield self.rx_desc_freed
            frame = self.rx_pending.popleft()
            self.rx_desc_free -= 1
            yield self.rx_mac_latency_ps
            slot = self.rx_next_slot % self.nic.rx_ring
            self.rx_next_slot += 1
            buf = 0x0200_0000 + slot * 0x800
            moved_by = env.now + self.internal_move_ps(len(frame.data) - 4)
            yield self.dma(True, buf, frame.data[:-4], "rx_data")
            if moved_by > env.now:
                # The NIC's data path still moving the frame: its descriptor is written back after.
                yield moved_by - env.now
            yield self.dma(True, self.descriptor_address(RX_RING_ADDRESS, slot),
                           self.descriptor(buf, len(frame.data) - 4, 1), "rx_desc_writeback")
            self.rx_dma_busy = False
            self.rx_fifo_used -= len(frame.data)
            if (self.nic.flow_control and self.nic.send_xon and self.xoff_until >= 0
                    and self.rx_fifo_used <= self.nic.fc_low_water_bytes):
                self.xoff_until = -1
                self.counters["xon_sent"] += 1
                self.tx_link.send_control(pause_frame(self.mac, 0))
            self.rx_done.append(frame)
            self.raise_interrupt("rx")

    def _cut_through(self) -> Process:
        """Write :attr:`cut_frame` to memory as it comes off the wire: each piece of ``rx_cut_through_bytes`` once
        its last byte has arrived (so on a bus faster than the wire the DMA waits for the wire, as the Tigon's
        receive DMA pauses on 64/66 PCI, Hughes-Jones et al. 2003, §4.3.3), then, after the frame's end, its
        descriptor."""
        env, frame = self.env, self.cut_frame
        self.rx_desc_free -= 1
        slot = self.rx_next_slot % self.nic.rx_ring
        self.rx_next_slot += 1
        buf = 0x0200_0000 + slot * 0x800
        data = frame.data[:-4]
        burst = self.nic.rx_cut_through_bytes
        for offset in range(0, len(data), burst):
            chunk = data[offset:offset + burst]
            ready = (self.cut_first_ps + self.rx_mac_latency_ps
                     + round((PREAMBLE_SFD_BYTES + offset + len(chunk)) * self.wire_ps_per_byte))
            if ready > env.now:
                yield ready - env.now
            yield self.dma(True, buf + offset, chunk, "rx_data")
        while not self.cut_ended:
            yield self.cut_end
        yield self.dma(True, self.descriptor_address(RX_RING_ADDRESS, slot),
                       self.descriptor(buf, len(frame.data) - 4, 1), "rx_desc_writeback")
        self.cut_frame = None
        self.rx_done.append(frame)
        self.raise_interrupt("rx")

    # -- interrupts -----------------------------------------------------------------------
    def raise_interrupt(self, cause: Literal["tx", "rx"]) -> None:
        """A frame of ``cause`` is done: assert INTA# now, or when a coalescence timer expires.

        Two timers per cause, as the 82544's TIDV/RDTR and the later e1000
        parts' TADV/RADV (or the Tigon's coalescing ticks): the packet timer
        (``*_int_delay_us``) restarts with every frame, so a burst interrupts
        that long after its last frame; the absolute timer
        (``*_abs_int_delay_us``) runs from the first frame after the last
        interrupt, bounding the delay in a stream. Whichever expires first
        asserts INTA#; neither set means an interrupt per frame, and so does
        an 8254x packet timer of 0 (Hughes-Jones et al. 2003, §8: RxInt 0). A Tigon counts the
        frames done too and interrupts at its ``*_max_coal_frames``.

        The interrupt is "asserted" from a timer's expiry until the service's first register access: a frame
        done in between is one after the last interrupt, and starts the absolute timer (the NIC's timers do not
        wait for the host), which is armed once the service has deasserted INTA#.
        """
        packet_ps, absolute_ps = self.int_delays_ps[cause]
        now = self.env.now
        timers = self.int_timers[cause]
        if self.int_asserted:
            if absolute_ps is not None:
                if timers[1] is None:
                    timers[1] = now + absolute_ps
                self.int_frames[cause] += 1
            return
        if packet_ps is not None:
            timers[0] = now + packet_ps
        if absolute_ps is not None and timers[1] is None:
            timers[1] = now + absolute_ps
        self.int_frames[cause] += 1
        limit = self.int_max_frames[cause]
        at_once = (packet_ps is None and absolute_ps is None) or (limit and self.int_frames[cause] >= limit)
        due = now if at_once else min([t for t in (*self.int_timers["tx"], *self.int_timers["rx"]) if t is not None])
        # A restarted packet timer may move the interrupt later; otherwise only an earlier one matters.
        if self.int_timer_due is not None and (self.int_timer_due == due if packet_ps is not None
                                               else self.int_timer_due <= due):
            return
        self._arm(due)

    def _arm(self, due: int) -> None:
        self.int_timer_due = due
        after_timeout(self.env, lambda: due - self.env.now, lambda: self._int_timer_expired(due))

    def _int_timer_expired(self, due: int) -> None:
        if self.int_timer_due != due or self.int_asserted:
            return
        self.int_timer_due = None
        self.int_timers = {"tx": [None, None], "rx": [None, None]}
        self.int_frames = {"tx": 0, "rx": 0}
        self.int_asserted = True
        if self.int_masked:
            # Only the cause register latches: the looping service reads it again, or asserts INTA# as it unmasks.
            return
        self._assert_line()

    def _assert_line(self) -> None:
        self.counters["interrupts"] += 1
        self.bus.interrupts.append([self.bus.clock_at_or_after(self.env.now), -1])
        self.rig.interrupt_rows.append([self.name, self.env.now, -1, 0, 0])
        self._row = len(self.rig.interrupt_rows) - 1
        self.int_event.notify()

    def _deassert(self) -> None:
        self.bus.interrupts[-1][1] = self.bus.clock_at_or_after(self.env.now)
        self.rig.interrupt_rows[self._row][2] = self.env.now
        self._cause_read()

    def _cause_read(self) -> None:
        """The service has read the cause register: the NIC's timers run again, from the frames done since."""
        self.int_asserted = False
        started = [t for t in (*self.int_timers["tx"], *self.int_timers["rx"]) if t is not None]
        if started:
            self._arm(max(self.env.now, min(started)))

    def _clean_tx(self) -> int:
        """Return the sent frames' descriptors to the driver: how many."""
        freed, self.tx_completed = self.tx_completed, 0
        if freed:
            self.tx_slots += freed
            self.tx_slot_freed.notify()
        return freed

    def _isr_loop(self) -> Process:
        """The interrupt service (Linux 2.4's non-NAPI drivers): read the cause (INTA# deasserts), clean the sent
        descriptors, hand each received frame to the stack (``rx_handler_us``: unmap, a new buffer, netif_rx into
        the NET_RX backlog), update the NIC's registers (those of the causes it served, by ``isr_exit_csr``'s
        tags) and, with ``rx_refill = "service"``, give it the cleaned receive descriptors back. A looping
        service (``isr_max_passes`` above 1: the e1000's e1000_intr) keeps INTA# masked, walks the rings in
        passes and reads its cause register again after each, passing again while a cause latched meanwhile;
        one still latched when it unmasks asserts INTA# at once. A service that masks with its first access
        (``isr_masks``: sk98lin) takes the frames done when it runs: a cause latched meanwhile by frames it took
        is cleared by its writes for its causes, one of frames it left asserts INTA# as it unmasks."""
        looping = self.nic.isr_max_passes > 1
        masking = looping or self.nic.isr_masks
        while True:
            if not self.int_asserted:
                yield self.int_event
            yield max(0, self.irq_latency_ps + self.noise.irq())
            with self.cpu.request(priority=INTERRUPT) as req:
                yield req
                self.int_masked = masking
                yield from self.csr_sequence(self.nic.isr_entry_csr, on_first=self._deassert)
                yield self.isr_ps
                row = self.rig.interrupt_rows[self._row]
                rx = freed = 0
                for n in range(1, self.nic.isr_max_passes + 1):
                    if not looping:
                        freed = self._clean_tx()
                    # Without a loop the service cleans the descriptors done when it read the cause register;
                    # a looping one walks the ring while descriptors are done.
                    count = len(self.rx_done)
                    if self.nic.rx_service_limit:
                        count = min(count, self.nic.rx_service_limit)
                    while count:
                        yield self.rx_handler_ps
                        self._netif_rx(self.rx_done.popleft())
                        rx += 1
                        count = len(self.rx_done) if looping else count - 1
                    if looping:
                        freed += self._clean_tx()
                    if n == self.nic.isr_max_passes:
                        break
                    yield self.csr_interval_ps
                    yield from self.csr(self.nic.isr_cause_csr)
                    if not self.int_asserted:
                        break
                    self._cause_read()
                row[3], row[4] = rx, freed
                yield from self.csr_sequence(self.isr_exit[bool(rx), bool(freed)])
                if masking:
                    self.int_masked = False
                    if self.int_asserted and (looping or self.tx_completed or self.rx_done):
                        self._assert_line()
                    else:
                        # The service's writes for its causes cleared what latched meanwhile of frames it took.
                        self.int_asserted = False
                if rx and self.nic.rx_refill == "softirq":
                    self.rx_cleaned += rx
                elif rx:
                    self.rx_desc_free += rx
                    self.rx_desc_freed.notify()
            if rx:
                self.backlog_kick.notify()
            if self.rx_done and self.nic.rx_service_limit:
                # Frames left for the next service: the NIC's receive cause is still pending.
                self.raise_interrupt("rx")

    def _netif_rx(self, frame: Frame) -> None:
        """Queue ``frame`` for the NET_RX softirq, as Linux 2.4's netif_rx: past ``netdev_max_backlog`` frames the
        queue throttles and drops every frame until it has emptied (softnet_stat's dropped)."""
        if self.backlog_throttled and not self.backlog:
            self.backlog_throttled = False
        if self.backlog_throttled or len(self.backlog) >= self.hp.netdev_max_backlog:
            self.backlog_throttled = True
            self.counters["softnet_dropped"] += 1
            self._lost(frame)
            return
        self.backlog.append((frame, self.env.now))

    def _lost(self, frame: Frame) -> None:
        """Note a message the receiving host dropped (its last fragment's frame stands for it)."""
        self.reassembly.pop(frame.seq, None)
        self.dropped.append(frame.seq)

    def _return_descriptor(self) -> None:
        self.rx_desc_free += 1
        self.rx_desc_freed.notify()

    def _softirq(self) -> Process:
        """The stack after the interrupt service (Linux 2.4's NET_RX softirq), then, with ``rx_refill =
        "softirq"``, the ring's refill.

        Each frame in the backlog costs the stack's share of ``rx_sw_us`` (IP
        and UDP), one frame at a time below the service's priority and above
        the applications' (the model's CPU is not preemptive: a service waits
        for the frame in hand), and goes to its socket (:meth:`_deliver`).
        Only when the backlog is empty does the refill run (the e1000 of 2002
        refills from a tasklet, which 2.4's do_softirq runs after NET_RX): a
        descriptor is the NIC's again when its ``rx_refill_csr`` write reaches
        it. A host that cannot keep up with the wire therefore runs out of
        descriptors, and its NIC's FIFO fills until flow control stops the
        sender (Hughes-Jones et al. 2003, §4.2.3).
        """
        while True:
            if self.backlog:
                with self.cpu.request(priority=SOFTIRQ) as req:
                    yield req
                    yield self.rx_stack_ps
                self._deliver(*self.backlog.popleft())
            elif self.rx_cleaned:
                # The refill runs to its end, taking the descriptors services clean meanwhile too.
                while self.rx_cleaned:
                    self.rx_cleaned -= 1
                    with self.cpu.request(priority=SOFTIRQ) as req:
                        yield req
                        yield self.csr_interval_ps
                        for k, access in enumerate(self.nic.rx_refill_csr):
                            last = k == len(self.nic.rx_refill_csr) - 1
                            yield from self.csr(access, self._return_descriptor if last else None)
                        if not self.nic.rx_refill_csr:
                            self._return_descriptor()
            else:
                yield self.backlog_kick

    def _deliver(self, frame: Frame, stamp_ps: int) -> None:
        """UDP's receive of ``frame``, which netif_rx stamped at ``stamp_ps``: a fragment waits for the rest of its
        datagram (IP reassembly, RFC 791; the whole datagram keeps its last fragment's stamp, as 2.4's
        ip_frag_reasm), a whole datagram goes to the socket's queue if its buffer fits (Linux's sock_queue_rcv_skb:
        the bytes queued plus its buffers under ``rcvbuf_bytes``), else it is dropped and counted as UDP
        RcvbufErrors."""
        offset = frame.ip_fragment_offset * 8
        held = self.reassembly.pop(frame.seq, [0, 0])
        if held[0] != offset:
            # A fragment before it was lost: the datagram can never be whole (the kernel's reassembly times out).
            self.counters["reasm_fails"] += 1
            self._lost(frame)
            return
        held[0] += int.from_bytes(frame.data[IP_TOTAL_LENGTH_AT:IP_TOTAL_LENGTH_AT + 2], "big") - IPV4_HEADER_BYTES
        held[1] += 1
        if frame.ip_more_fragments:
            self.reassembly[frame.seq] = held
            return
        truesize = held[1] * self.rx_truesize
        if self.socket_bytes + truesize >= self.hp.rcvbuf_bytes:
            self.counters["udp_rcvbuf_errors"] += 1
            self._lost(frame)
            return
        self.counters["udp_in_datagrams"] += 1
        self.stamps[frame.seq] = stamp_ps
        self.socket.append((frame, held[0] - UDP_HEADER_BYTES, truesize))
        self.socket_bytes += truesize
        if self.app_idle:
            self.socket_ready.notify()

    def _application(self) -> Process:
        """The receiving application (udpmon): one datagram a receive call, ``rx_app_us`` and the copy of its
        payload to user space, then the datagram is the application's (``on_receive``). With nothing queued it
        blocks in the call, and waking it (the scheduler, a context switch) costs ``wakeup_us`` when a datagram
        comes: twice in every round trip, never in a stream it cannot keep up with. On a processor of its own, the
        first ``wakeup_idle_us`` of that is the processor leaving its idle loop: a wait, not work."""
        while True:
            woken = 0
            if not self.socket:
                self.app_idle = True
                yield self.socket_ready
                woken = max(0, self.wakeup_ps + self.noise.wakeup())
                idle = min(woken, self.wakeup_idle_ps)
                if idle:
                    yield idle
                    woken -= idle
            self.app_idle = False
            frame, payload, truesize = self.socket[0]
            with self.app_cpu.request(priority=APPLICATION) as req:
                yield req
                yield max(0, woken + self.rx_app_ps + round(self.copy_ps_per_byte * payload) + self.noise.cache())
            self.socket.popleft()
            self.socket_bytes -= truesize
            self.on_receive(frame, self.env.now)


class Rig:
    """Builds the two hosts and the link, runs the scenario, and collects a :class:`RigRun`."""

    def __init__(self, scenario: Scenario, bus: BusProfile, nic: NicProfile, host: HostProfile,
                 *, recv_host: HostProfile | None = None, recv_bus: BusProfile | None = None,
                 link_rate_bps: float = 1e9, phy_latency_ns: float = 350.0):
        """``host`` is host A's profile and, unless ``recv_host`` is given, host B's too. Each host sets up the NIC
        (its ``nic`` settings) and drives the bus (its ``bridge``) its own way."""
        recv_host = host if recv_host is None else recv_host
        recv_bus = bus if recv_bus is None else recv_bus
        for p in (scenario, bus, recv_bus, nic, host, recv_host):
            p.check()
        self.scenario = scenario
        self.hosts = (host, recv_host)
        # The host bridge's wait states and disconnects are the chipset's, the NIC's settings its driver's.
        self.nics = tuple(h.nic_with_settings(nic) for h in self.hosts)
        buses = tuple(h.bus_with_bridge(b) for h, b in zip(self.hosts, (bus, recv_bus)))
        self.rng = np.random.default_rng(scenario.seed)
        self.link_rate_bps = link_rate_bps
        self.phy_latency_ps = round(phy_latency_ns * PS_PER_NS)
        # Independent clocks: each bus and the probe get their own phase.
        phases = self.rng.integers(0, 1 << 30, size=3)
        self.probe_phase_ps = int(phases[2] % GMII_PERIOD_PS)
        self.probe_clock = Clock(self.probe_phase_ps, GMII_PERIOD_PS)
        # The payloads' random fill: the rest of the generator's draws (UniformBytes: nothing else draws).
        self.payload_fill = UniformBytes(self.rng)
        self.env = Engine()
        self.buses = {
            "send_pci": BusRecord(buses[0], int(phases[0] % round(buses[0].period_ps))),
            "recv_pci": BusRecord(buses[1], int(phases[1] % round(buses[1].period_ps))),
        }
        self.probe_tx: list[tuple[int, Frame]] = []
        self.probe_rx: list[tuple[int, Frame]] = []
        self.interrupt_rows: list[list[Any]] = []
        ab = Link(self.env, self, "a->b", self.probe_tx)
        ba = Link(self.env, self, "b->a", self.probe_rx)
        self.a = Host(self.env, self, "send", self.buses["send_pci"], self.nics[0], host, ab,
                      "00:60:1d:00:00:01", "198.18.0.1", HostNoise(host, scenario.seed, 0))
        self.b = Host(self.env, self, "recv", self.buses["recv_pci"], self.nics[1], recv_host, ba,
                      "00:60:1d:00:00:02", "198.19.0.1", HostNoise(recv_host, scenario.seed, 1))
        ab.deliver = self.b.receive_frame
        ba.deliver = self.a.receive_frame
        if self.nics[1].rx_cut_through_bytes:
            ab.first_byte = self.b.receive_start
        if self.nics[0].rx_cut_through_bytes:
            ba.first_byte = self.a.receive_start
        self.packets: dict[tuple[str, int], list[Any]] = {}

    @staticmethod
    def ps(ns: float) -> int:
        """Model time (integer ps) of a duration in ns."""
        return round(ns * PS_PER_NS)

    def _message(self, kind: Kind, seq: int, size: int) -> bytes:
        return make_payload(size, kind, seq, test_id=self.scenario.seed, rng=self.payload_fill)

    def _note_send(self, kind: str, seq: int, size: int, point: int) -> None:
        self.packets[(kind, seq)] = [seq, kind, size, 0, self.env.now, -1, -1, point]

    def _arrived(self, kind: str, frame: Frame, t_ps: int) -> bool:
        """Note ``frame`` of a ``kind`` message delivered at ``t_ps``: the message has arrived (its packet row's
        arrival time) when this is its last fragment, the IPv4 More Fragments flag clear (RFC 791). Whether it has."""
        row = self.packets.get((kind, frame.seq))
        if row is None or frame.ip_more_fragments:
            return False
        row[6] = t_ps
        return True

    def _on_frame_at(self, host_kind: str) -> Callable[[Frame, int], None]:
        def deliver(frame: Frame, t_ps: int) -> None:
            self._arrived(host_kind, frame, t_ps)
        return deliver

    def _settle(self) -> Process:
        """Wait until both hosts have settled, then :data:`POINT_GAP_US` more: the gap between two points."""
        while not (self.a.settled() and self.b.settled()):
            yield round(SETTLE_POLL_US * PS_PER_US)
        yield round(POINT_GAP_US * PS_PER_US)

    def _stream(self) -> Process:
        """Every point's stream, each packet due at its stream's start + its number x spacing (an absolute
        schedule: a late packet does not delay the rest). Messages are numbered through the whole run."""
        seq = 0
        yield round(self.scenario.start_us * PS_PER_US)
        for k, point in enumerate(self.scenario.points()):
            if k:
                yield from self._settle()
            t0 = self.env.now
            spacing = round(point.spacing_us * PS_PER_US)
            for i in range(point.count):
                due = t0 + i * spacing
                if due > self.env.now:
                    yield due - self.env.now
                self._note_send("stream", seq, point.size_bytes, k)
                frames = yield from self.a.send_message(self._message(Kind.STREAM, seq, point.size_bytes), self.b,
                                                        seq)
                self.packets[("stream", seq)][3] = len(frames)
                seq += 1

    def _latency(self) -> Process:
        """Every point's requests, one at a time: the next :data:`LATENCY_GAP_US` after the previous response."""
        sc = self.scenario
        seq = 0
        yield round(sc.start_us * PS_PER_US)
        for k, point in enumerate(sc.points()):
            if k:
                yield from self._settle()
            for _ in range(point.count):
                answered = self.env.event()
                self._awaiting = (seq, answered)
                self._note_send("request", seq, sc.request_bytes, k)
                frames = yield from self.a.send_message(self._message(Kind.REQUEST, seq, sc.request_bytes), self.b,
                                                        seq)
                self.packets[("request", seq)][3] = len(frames)
                yield answered
                yield round(LATENCY_GAP_US * PS_PER_US)
                seq += 1

    def _respond(self, frame: Frame, t_ps: int) -> None:
        if self._arrived("request", frame, t_ps):
            self.env.process(self._send_response(frame.seq))

    def _send_response(self, seq: int) -> Process:
        point = self.packets[("request", seq)][7]
        size = self.scenario.points()[point].size_bytes
        self._note_send("response", seq, size, point)
        frames = yield from self.b.send_message(self._message(Kind.RESPONSE, seq, size), self.a, 0x8000 | seq)
        self.packets[("response", seq)][3] = len(frames)

    def _got_response(self, frame: Frame, t_ps: int) -> None:
        if not self._arrived("response", frame, t_ps):
            return
        seq, ev = self._awaiting
        if seq == frame.seq and not ev.triggered:
            ev.succeed()

    def run(self, tail_us: float = 20.0, checkpoint: Callable[[int], None] | None = None,
            every_ps: int = 0) -> RigRun:
        """Run the scenario to its end; ``checkpoint(t_ps)`` is called every ``every_ps`` of simulated time,
        when every event before ``t_ps`` has happened and none after."""
        if checkpoint is not None and every_ps <= 0:
            raise ValueError(f"checkpoints need a positive interval, not every_ps={every_ps}")
        if self.scenario.kind == "stream":
            self.b.on_receive = self._on_frame_at("stream")
            self.env.process(self._stream())
        else:
            self.b.on_receive = self._respond
            self.a.on_receive = self._got_response
            self.env.process(self._latency())
        every_ps = every_ps if checkpoint is not None else FREEZE_EVERY_PS
        with fewer_collections():
            # The run ends at its last event (its time is env.now), the last checkpoint after it.
            while (t := self.env.peek()) < math.inf:
                due = (t // every_ps + 1) * every_ps
                self.env.advance(due)
                # What the run has made lives on: the collector stops traversing it, and the forked workers
                # (checkpoint) share its pages instead of the collections after the fork copying them.
                gc.freeze()
                if checkpoint is not None:
                    checkpoint(due)
        end = self.env.now + round(tail_us * PS_PER_US)
        self._fill_wire_times()
        counters = {f"{h.name}_{k}": v for h in (self.a, self.b) for k, v in h.counters.items()}
        return RigRun(
            buses=self.buses, probe_tx=self.probe_tx, probe_rx=self.probe_rx,
            probe_phase_ps=self.probe_phase_ps,
            packets=[tuple(r) for r in sorted(self.packets.values(), key=lambda r: (r[4], r[1]))],
            interrupts=[tuple(r) for r in self.interrupt_rows],
            counters=counters, trigger_ps=self._trigger_ps(), end_ps=end,
            cpu_busy={h.name: h.busy_intervals() for h in (self.a, self.b)},
            cpus={h.name: h.hp.cpus for h in (self.a, self.b)},
            dropped={h.name: h.dropped for h in (self.a, self.b)},
            stamps={h.name: h.stamps for h in (self.a, self.b)},
        )

    def _trigger_ps(self) -> int:
        """The analyzer triggers on the first FRAME# of the sending bus (the first CSR access of the test)."""
        send = self.buses["send_pci"]
        return send.time_of(send.transactions[0].start_clk) if send.transactions else 0

    def _fill_wire_times(self) -> None:
        """First preamble byte on the wire of each message's first frame (at the probe)."""
        for frames, kinds in ((self.probe_tx, ("stream", "request")), (self.probe_rx, ("response",))):
            for clk, frame in frames:
                for kind in kinds:
                    row = self.packets.get((kind, frame.seq))
                    if row is not None and row[5] < 0:
                        row[5] = self.probe_clock.time_of(clk)
