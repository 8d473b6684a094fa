"""Bus-level timing from decoded capture-set tables: what a logic analyzer on both PCI buses and a
link probe show (Hughes-Jones et al. 2003, §4.1.3, 4.2.3, 4.3.3, 5.2.3, 6.1.3, 6.2.3 and 9).

Everything here works from the **decoded** tables a real rig yields
(``CaptureSet.read_table("decoded/<source>/pci" | ".../irq" | "decoded/<probe>/ethernet")``,
NumPy structured arrays with the columns of ``docs/decoders.md``), never from
the simulator's ``truth/``. Functions are pure; results are frozen
dataclasses; times are on the capture set's common timeline; every field name
carries its unit (``_ns``, ``_us``, ``_mbytes_per_s``, ``_pct``, ``_clocks``).

Public API
----------
Per bus (one host's PCI bus, with its INTA# table):

``clock_period_ns(pci) -> float``
    the bus clock, from the transactions' durations and clock counts.
``transaction_bytes(pci) -> ndarray``
    bytes per transaction (``bytes``, or data phases x bus word when C/BE# was not probed).
``bus_activity(pci, irq, frames_in, frames_out) -> BusActivity``
    the NIC's DMA grouped into **transfers** (``fetch``: descriptor and frame read
    for sending; ``receive``: a received frame and its descriptor written to
    memory; ``writeback``: a sent frame's descriptor written back; ``other``),
    each tied to its frame on the link; the host's CSR accesses grouped into
    **clusters** (``send``: the driver's setup before a fetch; ``interrupt``:
    the service routine's first accesses, which clear INTA#; ``update``: its
    later CSR updates; ``refill``: the receive ring's tail written outside
    the service; ``other``); and the interrupts with their cause.
``dma_timing(activity, pci) -> DmaTiming``, ``csr_timing(activity) -> CsrTiming``,
``interrupt_timing(activity) -> InterruptTiming``, ``wait_states(pci) -> dict[str, WaitStates]``,
``stop_counts(pci) -> StopCounts``, ``occupancy(pci, t0_ns, t1_ns, frames) -> Occupancy``
    the measurements of Hughes-Jones et al. 2003: CSR setup per send and per interrupt, DMA
    burst and per-frame durations and rates, wait states, STOP# terminations,
    interrupt coalescence (DMA to INTA#), interrupt to CSR update, interrupts
    per frame, bus occupancy per frame period.
``host_bus(activity, pci, irq, t0_ns, t1_ns, frames) -> HostBus``
    all of the above for one bus.

Link (the probe's ``ethernet`` table):

``data_frames(ethernet, direction) -> ndarray``
    the frames carrying data one way (MAC control and bad-FCS frames left out).
``wire_timing(frames, link_rate_bps) -> WireTiming``
    frame time on the wire against ``(length + 8) x 8`` bit times, spacing, gaps.
``pause_summary(ethernet, link_rate_bps) -> PauseSummary``
    802.3x PAUSE frames: times, quanta, the pause they ask for, the gap they
    cause in the other direction, their period (Hughes-Jones et al. 2003, §4.2.3: ~every 900 us).

Both buses and the link:

``frame_paths(frames, sender, receiver) -> list[FramePath]``
    per frame: send CSR setup -> first word on the sending bus -> frame on the
    wire -> first word on the receiving bus -> receive interrupt -> its CSR
    accesses (Hughes-Jones et al. 2003, §4.1.3: 23 us first word to first word, 36 us software to
    software).
``host_software_time_us(rtt_intercept_us, one_way_us) -> float``
    the IP stack and application time per node, as Hughes-Jones et al. 2003, §4.1.3 estimates it.
``bus_timeline(send_pci, send_irq, recv_pci, recv_irq, ethernet) -> BusTimeline``
    everything for a capture set of the rig: the probe sits at the sending
    host, so its ``tx`` frames leave the sending bus and reach the receiving one.

How transfers are told apart
----------------------------
With AD and C/BE# probed, the decoded command says read or write. Without
them (Hughes-Jones et al. 2003's traces show control lines only) the link decides: a frame
that has begun to arrive and not yet been moved makes the next NIC write a
``receive`` (a NIC that cuts through, as the Alteon's Tigon, moves a frame
while it still comes in, pausing for the wire between its pieces: a receive
waits for its frame's bytes as long as the frame is on the wire); a frame
sent and not yet written back makes a descriptor-sized
transaction a ``writeback``; a frame still to be sent makes a ``fetch``. A
transfer ends when its frame's bytes (length less the FCS) have crossed the
bus, plus the descriptor, or at a gap of more than ``dma_gap_ns`` of idle
bus (a transfer the host bridge broke up resumes after other transactions).
This is exact for one-way traffic and request-response but for rare meetings
of a fetch's descriptor and a writeback; under heavy traffic both ways at
once, record AD and C/BE# (``nicrig simulate --with-ad``).

Register accesses are attributed to the driver's sequences (send setup,
interrupt service, its update) by what the bus shows, not by idle gaps
(under load DMA fills them): who mastered a transaction (GNT#), retries
belonging to the access that completes (PCI 3.0 3.3.3.2.2), the access
that cleared INTA# opening a service, the doorbell a fetch answers closing
a send. A receive ring's refill written on its own, after the stack (Linux
2.4's e1000), is told apart first and kept out of the sequences
(:func:`_refill_runs`; by its register where AD was probed and the NIC's
register map is given, :mod:`nicrig.analysis.nic_registers`). The sequences
are learnt per capture from both buses
(:func:`driver_sequences`); without clear evidence the accesses fall back
to runs (``csr_gap_ns`` of idle bus at most between them, cut where a fetch
or a service begins). ``docs/analysis.md`` says more, and what the tests
check.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from nicrig.analysis.nic_registers import RegisterMap
from nicrig.analysis.quantity import quantile_interval

#: A NIC that cuts through moves the last piece of a frame this long after the frame's end at the probe at most (its
#: MAC's and PHY's latency): until then a receive still short of its frame's bytes waits for them.
ARRIVAL_SLACK_NS = 2000.0
#: NIC bursts of one transfer follow each other within this (the NIC's own gap plus arbitration).
DMA_GAP_NS = 500.0
#: A driver's register accesses in one go follow each other within this (CPU time per access).
CSR_GAP_NS = 700.0
#: A fetch starting within this after a run of CSR accesses answers it (the NIC's doorbell reaction): the SK-9843
#: under sk98lin v4.06 fetches an idle queue's descriptor ~3.4 us after its start command, within the ~4 us that
#: Hughes-Jones et al. 2003, §4.1.3 leaves from the send's register setup to its first data word (27 us to the
#: receiving bus, 23 of them from the first word on the sending one).
DOORBELL_NS = 4000.0
#: The percentile of a service's idle gaps that marks where its first accesses end and its update begins.
SERVICE_GAP_PERCENTILE = 90
#: That gap must exceed every other gap of the service (at the same percentile) this many times over for the cut
#: to be taken; the profiles of the validation show 3.5 times or more.
SERVICE_CUT_MARGIN = 2.0
#: Transactions up to this size can be descriptors (legacy e1000 16 bytes; others 32).
DESCRIPTOR_MAX_BYTES = 32
#: An interrupt asserted within this many bus clocks of a DMA's end is the NIC's interrupt at once for it.
AT_ONCE_CLOCKS = 2
#: Ethernet MAC control (802.3 Annex 31A), the EtherType of PAUSE frames.
MAC_CONTROL_ETHERTYPE = 0x8808
#: Preamble and SFD, in bytes: on the wire before the destination address.
PREAMBLE_BYTES = 8
FCS_BYTES = 4
#: PAUSE quanta are 512 bit times (802.3 Annex 31B).
PAUSE_QUANTUM_BITS = 512

READ_COMMANDS = (b"Memory Read", b"Memory Read Multiple", b"Memory Read Line")
WRITE_COMMANDS = (b"Memory Write", b"Memory Write and Invalidate")
TRANSFER_ROLES = ("fetch", "receive", "writeback", "other")
CLUSTER_ROLES = ("send", "interrupt", "update", "refill", "other")


# -- small statistics ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Spread:
    """Summary of a set of values (the unit is in the name of the field holding it); NaN when empty.
    ``median_ci95``: the median's distribution-free 95% half-width from the values' scatter alone (NaN for fewer
    than six values; :func:`nicrig.analysis.quantity.quantile_interval`), to be combined with the resolution of
    the time stamps the values come from, which the values do not know."""

    count: int
    median: float
    mean: float
    minimum: float
    maximum: float
    median_ci95: float

    @property
    def empty(self) -> bool:
        return self.count == 0


def spread(values: np.ndarray | list[float]) -> Spread:
    """Count, median, mean, minimum and maximum of the finite ``values``."""
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v)]
    if v.size == 0:
        nan = float("nan")
        return Spread(0, nan, nan, nan, nan, nan)
    return Spread(int(v.size), float(np.median(v)), float(v.mean()), float(v.min()), float(v.max()),
                  quantile_interval(v, 0.5)[1])


# -- one bus -------------------------------------------------------------------------------------

def clock_period_ns(pci: np.ndarray) -> float:
    """The bus clock period (ns), fitted to the transactions' durations and clock counts.

    A normally completed single-address transaction without master waits lasts
    1 (address) + target waits + data phases clocks (``docs/decoders-pci.md``);
    the least-squares ratio of duration to clocks over all of them is the
    period, good to far better than the 1 ns of the table's times. NaN if the
    table has no such transaction.
    """
    ok = ((pci["termination"] == b"normal") & ~pci["dac"] & (pci["master_wait_clocks"] == 0)
          & (pci["data_phases"] > 0))
    clocks = (1 + pci["data_phases"][ok] + pci["target_wait_clocks"][ok]).astype(np.float64)
    duration = (pci["t_end_ns"][ok] - pci["t_ns"][ok]).astype(np.float64)
    period = float((duration * clocks).sum() / (clocks * clocks).sum()) if clocks.size else math.nan
    return period if period > 0 else math.nan


def transaction_bytes(pci: np.ndarray) -> np.ndarray:
    """Bytes each transaction moved: ``bytes`` when C/BE# was probed, else data phases x bus word (4 or 8)."""
    word = np.where(pci["wide"], 8, 4)
    return np.where(pci["bytes"] >= 0, pci["bytes"], pci["data_phases"] * word).astype(np.int64)


def _directions(pci: np.ndarray) -> np.ndarray:
    """Per transaction: 'r' (the NIC reads memory), 'w' (it writes), '' when the command was not probed."""
    out = np.full(len(pci), "", dtype="<U1")
    out[np.isin(pci["command"], READ_COMMANDS)] = "r"
    out[np.isin(pci["command"], WRITE_COMMANDS)] = "w"
    return out


@dataclass(frozen=True)
class Transfer:
    """NIC-mastered DMA moving one frame (or descriptor): its transactions (rows of the pci table).

    ``frame`` indexes the frames the bus activity was given: ``frames_out`` for
    fetch and writeback, ``frames_in`` for receive; -1 when not tied to one.
    ``data_start_ns`` is the first transaction after a leading descriptor
    fetch: the first word of the frame itself.
    """

    role: str
    frame: int
    rows: tuple[int, ...]
    start_ns: float
    end_ns: float
    data_start_ns: float
    bytes: int

    @property
    def duration_ns(self) -> float:
        return self.end_ns - self.start_ns


@dataclass(frozen=True)
class CsrCluster:
    """A run of host accesses to the NIC's registers (rows of the pci table), ``CSR_GAP_NS`` apart at most.

    ``transfer``: the fetch a ``send`` cluster rang for; ``interrupt``: the
    interrupt an ``interrupt`` or ``update`` cluster served; -1 otherwise.
    """

    role: str
    rows: tuple[int, ...]
    start_ns: float
    end_ns: float
    accesses: int
    retries: int
    transfer: int = -1
    interrupt: int = -1

    @property
    def duration_ns(self) -> float:
        return self.end_ns - self.start_ns


@dataclass(frozen=True)
class Interrupt:
    """One INTA# low interval, the DMA that caused it and the CSR clusters that served it (-1/NaN: none seen)."""

    assert_ns: float
    deassert_ns: float
    cause_end_ns: float
    service_cluster: int
    update_cluster: int


@dataclass(frozen=True)
class BusActivity:
    """One host's bus, decoded into transfers, CSR clusters and interrupts (all in time order)."""

    clock_period_ns: float
    transfers: tuple[Transfer, ...]
    clusters: tuple[CsrCluster, ...]
    interrupts: tuple[Interrupt, ...]
    #: The driver's interrupt service could not be cut from its update: each ``interrupt`` cluster holds both.
    service_uncut: bool = False
    #: The driver's register sequences could not be learnt from the capture: the ``send``, ``interrupt`` and
    #: ``update`` clusters are runs of accesses (``CSR_GAP_NS`` of idle bus apart at most, cut where a fetch or a
    #: service begins) placed by the fetches and INTA#, not the driver's sequences (:func:`_activity`).
    sequences_unlearnt: bool = False

    def of_role(self, role: str) -> list[Transfer]:
        return [t for t in self.transfers if t.role == role]

    def clusters_of_role(self, role: str) -> list[CsrCluster]:
        return [c for c in self.clusters if c.role == role]


@dataclass
class _Open:
    """A transfer being assembled by the sweep of :func:`_transfers`.

    ``phase`` is what it takes next: ``desc`` (descriptor-sized transactions,
    at most ``descriptor`` bytes in all: a descriptor the host bridge may
    split), ``data`` (the frame's bytes, until ``need_bytes``), or ``done``.
    A fetch runs desc (when it starts with one) then data; a receive data
    then desc; a writeback desc only.
    """

    role: str
    frame: int
    need_bytes: int | None
    direction: str
    phase: str
    rows: list[int] = field(default_factory=list)
    data_bytes: int = 0
    desc_bytes: int = 0
    data_row: int = -1
    end_ns: float = 0.0
    next_address: int = -1

    def unfinished(self, descriptor: int) -> bool:
        """Whether more of this transfer is to come (a frame short of its bytes, a descriptor of its size)."""
        if self.phase == "data" or (self.role == "fetch" and self.phase == "desc"):
            return self.need_bytes is not None
        return self.role == "writeback" and self.desc_bytes < descriptor

    def take(self, row: int, nbytes: int, end_ns: float, direction: str, descriptor: int, address: int = -1,
             span: int = 0) -> bool:
        """Add the transaction if it continues this transfer; False if it starts another.

        ``address`` (-1: AD not recorded) and ``span`` (data phases x bus word) place it in memory: a frame's
        buffer is contiguous and a master resumes a burst its target cut short at the next data phase's
        address (PCI 2.3 3.3.3.2), so data that does not follow on is not this frame's.
        """
        if direction and self.direction and direction != self.direction:
            return False
        small = nbytes <= descriptor
        elsewhere = address >= 0 and self.next_address >= 0 and address != self.next_address
        if self.phase == "data" and elsewhere:
            if self.role != "receive" or not small:
                return False
            self.phase = "desc"  # a receive's data is followed by its descriptor, written to the ring
        if self.phase == "desc" and small and self.desc_bytes + nbytes <= descriptor:
            self.desc_bytes += nbytes
        elif self.phase == "desc" and self.role == "fetch" and not small:
            self.phase = "data"
            return self.take(row, nbytes, end_ns, direction, descriptor, address, span)
        elif self.phase == "data":
            if (self.rows and small and not direction and self.need_bytes is not None
                    and self.need_bytes - self.data_bytes > nbytes):
                # Host bridges cut bursts at aligned boundaries: the only short data burst is a frame's
                # last. A descriptor-sized transaction before that is someone else's (a writeback).
                return False
            self.data_row = row if self.data_row < 0 else self.data_row
            self.data_bytes += nbytes
            self.next_address = address + span if address >= 0 else -1
            if self.need_bytes is not None and self.data_bytes >= self.need_bytes:
                self.phase = "desc" if self.role == "receive" else "done"
        else:
            return False
        self.rows.append(row)
        self.end_ns = end_ns
        self.direction = self.direction or direction
        return True


def descriptor_bytes(dma_bytes: np.ndarray, descriptor_max: int = DESCRIPTOR_MAX_BYTES) -> int:
    """The NIC's descriptor size: the commonest size of its transactions up to ``descriptor_max`` bytes.

    Descriptors are the NIC's only short transfers besides a frame's last
    burst; a host bridge may split one (two 16-byte halves of 32), which
    leaves the whole the commonest still.
    """
    small = dma_bytes[(dma_bytes > 0) & (dma_bytes <= descriptor_max)]
    if small.size == 0:
        return descriptor_max
    sizes, counts = np.unique(small, return_counts=True)
    return int(sizes[np.argmax(counts)])


def _role(direction: str, small: bool, next_is_data: bool, rx_pending: bool, wb_pending: bool,
          fetchable: bool) -> str:
    """The role of a transfer starting with a transaction of this direction and size (see the module doc)."""
    if direction == "r":
        return "fetch" if fetchable else "other"
    can_fetch = fetchable and direction == ""
    if small:
        # A descriptor alone after a sent frame is its writeback; a descriptor
        # followed at once by data is the next frame's fetch.
        if wb_pending and not (can_fetch and next_is_data):
            return "writeback"
        return "fetch" if can_fetch else "other"
    if rx_pending:
        return "receive"
    return "fetch" if can_fetch else "other"


def _address_known(pci: np.ndarray) -> np.ndarray:
    """Per row of a decoded ``pci`` table, whether AD was probed for its address (``has_address``; a table without
    the column knows none)."""
    return pci["has_address"] if "has_address" in (pci.dtype.names or ()) else np.zeros(len(pci), bool)


def retried_repeats(pci: np.ndarray) -> np.ndarray:
    """Per row of a decoded ``pci`` table: for a NIC transaction the target retried, the row of the repeat that
    completed it (-1 when the capture holds none, and for every other row).

    A target that ends a transaction with Retry (STOP# before any data phase, PCI Local Bus 2.2 §3.3.3.2.1) has
    moved nothing, and the master must repeat it with the same address and command; a bridge answering delayed
    reads (§3.3.3.3) retries the first attempt while it fetches the data. The attempt is part of the repeat's
    transfer, not one of its own. When AD or C/BE# were not probed, the NIC's next transaction with the same
    (unknown) address and command is taken for the repeat.
    """
    dma = pci["kind"] == b"dma"
    retried = dma & (pci["termination"] == b"retry")
    owner = np.full(len(pci), -1, dtype=np.int64)
    if not retried.any():
        return owner
    rows = np.flatnonzero(dma)
    known = _address_known(pci)[rows]
    address = np.where(known, pci["address"][rows], -1).astype(np.int64)
    _, command = np.unique(pci["command"][rows], return_inverse=True)
    # rows grouped by (address, command), in time order within a group: a retry's repeat is the first
    # completed row after it in its group
    order = np.lexsort((pci["t_ns"][rows], command, address))
    done = ~retried[rows][order]
    position = np.arange(order.size)
    next_done = np.minimum.accumulate(np.where(done, position, order.size)[::-1])[::-1]
    found = np.flatnonzero(next_done < order.size)
    same = np.zeros(order.size, bool)
    a, c = address[order], command[order]
    same[found] = (a[next_done[found]] == a[found]) & (c[next_done[found]] == c[found])
    attempt = ~done & same
    owner[rows[order[attempt]]] = rows[order[next_done[attempt]]]
    return owner


def _transfers(pci: np.ndarray, frames_in: np.ndarray | None, frames_out: np.ndarray | None, *,
               gap_ns: float, descriptor_max: int) -> list[Transfer]:
    """Sweep the NIC's transactions in time order, grouping them into transfers tied to frames.

    A retried attempt moved no data: it joins the transfer of the repeat that did (``retried_repeats``),
    which it starts when it led it; the sweep itself sees only transactions that moved data.
    """
    repeat = retried_repeats(pci)
    attempted = (pci["kind"] == b"dma") & (pci["termination"] == b"retry")
    dma = np.flatnonzero((pci["kind"] == b"dma") & ~attempted)
    nbytes = transaction_bytes(pci)
    direction = _directions(pci)
    t0, t1 = pci["t_ns"].astype(np.float64), pci["t_end_ns"].astype(np.float64)
    descriptor = descriptor_bytes(nbytes[dma], descriptor_max)
    known = _address_known(pci)
    address = np.where(known, pci["address"], 0).astype(np.int64)
    address[~known] = -1
    span = pci["data_phases"].astype(np.int64) * np.where(pci["wide"], 8, 4)
    linked = frames_in is not None and frames_out is not None
    empty = np.zeros(0, dtype=np.float64)
    in_start = frames_in["t_ns"].astype(np.float64) if frames_in is not None else empty
    in_end = frames_in["t_end_ns"].astype(np.float64) if frames_in is not None else empty
    in_len = frames_in["length"] if frames_in is not None else np.zeros(0, np.int64)
    out_start = frames_out["t_ns"].astype(np.float64) if frames_out is not None else empty
    out_end = frames_out["t_end_ns"].astype(np.float64) if frames_out is not None else empty
    out_len = frames_out["length"] if frames_out is not None else np.zeros(0, np.int64)
    n_rx = n_fetch = n_wb = 0
    out: list[Transfer] = []
    cur: _Open | None = None

    # receives whose frame is in memory but whose descriptor was not written back at once (indices in ``out``)
    awaiting: list[int] = []

    def close(o: _Open) -> None:
        first_data = o.data_row if o.data_row >= 0 else o.rows[0]
        if o.role == "receive" and o.phase == "desc" and o.desc_bytes == 0:
            awaiting.append(len(out))
        out.append(Transfer(o.role, o.frame, tuple(o.rows), float(t0[o.rows[0]]), o.end_ns,
                            float(t0[first_data]), int(nbytes[o.rows].sum())))

    late_receive, late_bytes = -1, 0  # the receive in ``out`` whose late descriptor is being written back

    def write_back_late(k: int, i: int) -> None:
        late = out[k]
        out[k] = replace(late, rows=late.rows + (i,), end_ns=float(t1[i]), bytes=late.bytes + int(nbytes[i]))

    def after_descriptor(j: int) -> bool:
        """Whether a data-sized transaction follows closely the descriptor-sized run starting at dma[j].

        A retried attempt right after the run is the NIC reading on: descriptor-sized transactions between it
        and the data are another of its engines' (a writeback while the bridge fetches the data), unless
        another attempt follows them (then the first was repeated by a descriptor-sized read of its own)."""
        total, k, reading = 0, j, False
        while k < dma.size and int(nbytes[dma[k]]) <= descriptor and (reading
                                                                       or total + int(nbytes[dma[k]]) <= descriptor):
            total += int(nbytes[dma[k]])
            if k + 1 < dma.size and idle_between(int(dma[k]), int(dma[k + 1])) > gap_ns:
                return False
            if total >= descriptor and k + 1 < dma.size:
                retried_next = bool(attempted[int(dma[k]) + 1:int(dma[k + 1])].any())
                if reading and retried_next:
                    return False
                reading = reading or (total == descriptor and retried_next)
            k += 1
        return k < dma.size and k > j and int(nbytes[dma[k]]) > descriptor

    # Bus time spent by other transactions does not count as a gap: a transfer the
    # bus bridge broke up resumes after a CSR access, another transfer's burst or another master's.
    busy = np.cumsum(np.concatenate([[0.0], t1 - t0]))
    suspended: _Open | None = None

    def idle_between(a: int, b: int) -> float:
        """Idle bus time (ns) from the end of row ``a`` to the start of row ``b``, other rows' time taken out."""
        return t0[b] - t1[a] - (busy[b] - busy[a + 1])

    def set_aside(o: _Open, held: _Open | None) -> _Open | None:
        """Keep ``o`` open if more of it may come (closing what was kept before), else close it."""
        if not o.unfinished(descriptor):
            close(o)
            return held
        if held is not None:
            close(held)
        return o

    def idle_since(o: _Open, i: int) -> float:
        return t0[i] - o.end_ns - (busy[i] - busy[o.rows[-1] + 1])

    def continues(o: _Open, i: int) -> bool:
        """Whether transaction ``i`` may continue ``o`` in time: little idle bus since, or ``o`` a receive whose
        frame is still arriving (cut through)."""
        if idle_since(o, i) <= gap_ns:
            return True
        return (o.role == "receive" and o.phase == "data" and 0 <= o.frame < in_end.size
                and t0[i] <= in_end[o.frame] + ARRIVAL_SLACK_NS)

    for j, i in enumerate(dma):
        args = (int(i), int(nbytes[i]), float(t1[i]), direction[i], descriptor, int(address[i]), int(span[i]))
        small = int(nbytes[i]) <= descriptor
        # a descriptor followed at once by data starts a fetch, unless a fetch broken off awaits its rest
        fetching = suspended is not None and suspended.role == "fetch" and suspended.phase != "done"
        next_is_data = small and not fetching and after_descriptor(j)
        ends_writeback = cur is not None and cur.role == "writeback" and next_is_data
        if cur is not None and not ends_writeback and continues(cur, i) and cur.take(*args):
            continue
        if suspended is not None and continues(suspended, i) and suspended.take(*args):
            resumed, suspended = suspended, None
            if cur is not None:
                suspended = set_aside(cur, suspended)
            cur = resumed
            continue
        if cur is not None:
            suspended = set_aside(cur, suspended)
            fetching = suspended is not None and suspended.role == "fetch" and suspended.phase != "done"
            next_is_data = small and not fetching and after_descriptor(j)
        if linked:
            rx_pending = int(np.searchsorted(in_start, t0[i], "right")) > n_rx
            wb_pending = int(np.searchsorted(out_end, t0[i], "right")) > n_wb
            # frames already on the wire without a fetch seen (before the capture) are skipped
            n_fetch = max(n_fetch, int(np.searchsorted(out_start, t0[i], "left")))
            fetchable = n_fetch < out_start.size
        else:
            rx_pending = wb_pending = direction[i] == "w"
            fetchable = direction[i] == "r"
        if (late_receive >= 0 and small and direction[i] != "r" and late_bytes + int(nbytes[i]) <= descriptor
                and idle_between(out[late_receive].rows[-1], int(i)) <= gap_ns):
            # the rest of a late descriptor the host bridge split (two 16-byte halves of 32)
            late_bytes += int(nbytes[i])
            write_back_late(late_receive, int(i))
            continue
        late_receive = -1
        if small and not next_is_data and not wb_pending and awaiting and direction[i] != "r":
            # A descriptor alone is no fetch (a fetch reads the frame after its descriptor) and no sent
            # frame awaits its writeback: it is the descriptor of the receive whose frame went before it,
            # written back once the NIC's own data path has moved the frame (Hughes-Jones et al. 2003,
            # §4.1.1's SK-9843).
            late_receive, late_bytes = awaiting.pop(0), int(nbytes[i])
            write_back_late(late_receive, int(i))
            cur = None
            continue
        role = _role(direction[i], small, next_is_data, rx_pending, wb_pending, fetchable)
        frame, need = -1, None
        if role == "receive" and linked:
            frame, need, n_rx = n_rx, int(in_len[n_rx]) - FCS_BYTES, n_rx + 1
        elif role == "fetch" and linked:
            frame, need, n_fetch = n_fetch, int(out_len[n_fetch]) - FCS_BYTES, n_fetch + 1
        elif role == "writeback" and linked:
            frame, n_wb = n_wb, n_wb + 1
        phase = "desc" if role == "writeback" or (role == "fetch" and small and next_is_data) else "data"
        cur = _Open(role, frame, need, direction[i], phase)
        if not cur.take(*args):
            # a descriptor-sized "data" transaction (a tiny frame): count it as data
            cur.phase = "data"
            cur.take(*args)
    for o in (suspended, cur):
        if o is not None:
            close(o)
    # An attempt with neither AD nor C/BE# probed is taken for a read: a bridge posts the NIC's memory writes
    # and delays its reads (PCI 2.2 3.3.3.3), and the NIC's other engines may go on meanwhile (a writeback).
    blind = attempted & (address < 0) & (direction == "")
    reads = np.array(sorted(r for t in out if t.role == "fetch" for r in t.rows), dtype=np.int64)
    later = np.searchsorted(reads, np.flatnonzero(blind), "right")
    repeat[np.flatnonzero(blind)] = np.append(reads, -1)[later]
    return sorted(_with_attempts(out, repeat, t0), key=lambda t: t.start_ns)


def _with_attempts(transfers: list[Transfer], repeat: np.ndarray, t0: np.ndarray) -> list[Transfer]:
    """``transfers`` with each retried attempt (``repeat``: its completing row, see ``retried_repeats``) among the
    rows of the transfer holding its repeat, that transfer starting at the attempt when it came first."""
    attempts = np.flatnonzero(repeat >= 0)
    if attempts.size == 0:
        return transfers
    holder = {row: k for k, t in enumerate(transfers) for row in t.rows}
    joined: dict[int, list[int]] = {}
    for a in attempts.tolist():
        k = holder.get(int(repeat[a]))
        if k is not None:
            joined.setdefault(k, []).append(a)
    out = list(transfers)
    for k, extra in joined.items():
        t = out[k]
        out[k] = replace(t, rows=tuple(sorted(t.rows + tuple(extra))),
                         start_ns=min(t.start_ns, float(t0[extra].min())))
    return out


Run = tuple[list[int], float, float]


def _clusters(pci: np.ndarray, gap_ns: float, boundaries_ns: np.ndarray) -> tuple[list[Run], list[bool]]:
    """CSR accesses grouped into runs (rows, start, end), and whether each run stands whole; ``pci`` in time order.

    Accesses belong together while the bus was idle for at most ``gap_ns``
    between them: time the NIC's DMA held the bus does not count, as the
    driver's posted writes wait for it. A run also ends at each of
    ``boundaries_ns`` (a fetch beginning: the doorbell has rung; an access
    clearing INTA#: a service begins); a run so cut at either end is not whole.
    """
    csr = np.flatnonzero(pci["kind"] == b"csr")
    busy = np.cumsum(np.concatenate([[0.0], (pci["t_end_ns"] - pci["t_ns"]).astype(np.float64)]))
    boundaries_ns = np.sort(boundaries_ns)
    runs: list[Run] = []
    whole: list[bool] = []
    for i in csr:
        start, end = float(pci["t_ns"][i]), float(pci["t_end_ns"][i])
        cut = False
        if runs:
            prev = runs[-1][0][-1]
            idle = start - runs[-1][2] - (busy[i] - busy[prev + 1])
            crossed = (np.searchsorted(boundaries_ns, start, "right")
                       > np.searchsorted(boundaries_ns, float(pci["t_ns"][prev]), "right"))
            if idle <= gap_ns and not crossed:
                rows, s, _ = runs[-1]
                runs[-1] = (rows + [int(i)], s, end)
                continue
            cut = idle <= gap_ns
            whole[-1] = whole[-1] and not cut
        runs.append(([int(i)], start, end))
        whole.append(not cut)
    return runs, whole


def _access_keys(pci: np.ndarray) -> list[tuple[Any, ...]]:
    """What tells register accesses apart on the bus: length in clocks, command, termination.

    Not the address: the two hosts' NICs sit at different BARs, and the
    sequence learnt on one bus serves the other.
    """
    period = clock_period_ns(pci)
    clocks = (np.rint((pci["t_end_ns"] - pci["t_ns"]) / period).astype(np.int64) if math.isfinite(period)
              else np.zeros(len(pci), np.int64))
    return list(zip(clocks.tolist(), pci["command"].tolist(), pci["termination"].tolist()))


def _send_sequences(runs: list[Run], whole: list[bool], keys: list[tuple[Any, ...]], fetch_starts: np.ndarray,
                    doorbell_ns: float) -> Counter[tuple[Any, ...]]:
    """How often each whole run of register accesses came right before a fetch (the NIC answering a doorbell)."""
    ends = np.array([r[2] for r in runs])
    rang = set()
    for f in fetch_starts:
        before = np.flatnonzero((ends <= f) & (f - ends <= doorbell_ns))
        if before.size and whole[before[-1]]:
            rang.add(int(before[-1]))
    return Counter(tuple(keys[i] for i in runs[k][0]) for k in rang)


def _majority(seen: Counter[tuple[Any, ...]]) -> tuple[Any, ...] | None:
    """The driver's register sequence for a send: the run of accesses most often seen right before a fetch.

    A driver makes the same accesses for every frame it sends: that run,
    learnt from the sends that stand alone, marks out the sends that ran
    into an interrupt service's accesses or into the next frame's setup.
    None when it is not clearly the commonest (at least 3 times, a third of
    all, more than any other) or is a single access, which looks like any
    other register write.
    """
    common = seen.most_common(2)
    if not common:
        return None
    signature, count = common[0]
    runner_up = common[1][1] if len(common) > 1 else 0
    clear = count >= 3 and 3 * count >= sum(seen.values()) and count > runner_up
    return signature if clear and len(signature) > 1 else None


def _split_at(runs: list[Run], keys: list[tuple[Any, ...]], signature: tuple[Any, ...],
              pci: np.ndarray) -> list[Run]:
    """Runs cut so that each occurrence of ``signature`` is a run of its own."""
    out = []
    n = len(signature)
    for rows, _, _ in runs:
        pieces, cut, k = [], 0, 0
        while k + n <= len(rows):
            if tuple(keys[r] for r in rows[k:k + n]) == signature:
                pieces += [rows[cut:k], rows[k:k + n]]
                cut = k = k + n
            else:
                k += 1
        pieces.append(rows[cut:])
        out += [(p, float(pci["t_ns"][p[0]]), float(pci["t_end_ns"][p[-1]])) for p in pieces if p]
    return out


@dataclass(frozen=True)
class _Access:
    """One register access that completed (rows of the pci table: the target's retries, then the completion).

    A retried transaction is no access: the master must repeat it (PCI 3.0
    3.3.3.2.2), so the retries belong to the access that finally completes,
    and how many there were (they depend on timing) is no part of the
    access's identity: its ``key`` is that of the completed transaction.
    """

    rows: tuple[int, ...]
    start_ns: float
    end_ns: float
    key: tuple[Any, ...]


def _completed_accesses(pci: np.ndarray, keys: list[tuple[Any, ...]]) -> list[_Access]:
    """The host's register accesses in time order (``pci`` sorted by time), each with the retries before it."""
    out: list[_Access] = []
    pending: list[int] = []
    for i in np.flatnonzero(pci["kind"] == b"csr").tolist():
        pending.append(i)
        if pci["termination"][i] != b"retry":
            out.append(_Access(tuple(pending), float(pci["t_ns"][pending[0]]), float(pci["t_end_ns"][i]), keys[i]))
            pending = []
    if pending:  # retried until the capture ended
        out.append(_Access(tuple(pending), float(pci["t_ns"][pending[0]]), float(pci["t_end_ns"][pending[-1]]),
                           keys[pending[-1]]))
    return out


@dataclass
class DriverSequences:
    """The driver's register sequences, as seen on a bus (each a tuple of access keys, learnt per capture).

    ``send``: the setup before each frame, ending with the doorbell the NIC
    answers by fetching; ``service``: the interrupt service's first accesses,
    starting with the one that clears INTA#; ``update``: its later ones.
    ``uncut``: the bus did not show where the service's first accesses end
    (``service`` then holds the whole service, ``update`` is empty).
    """

    send: tuple[tuple[Any, ...], ...]
    service: tuple[tuple[Any, ...], ...]
    update: tuple[tuple[Any, ...], ...]
    uncut: bool = False


@dataclass
class _Evidence:
    """What a bus shows of the driver's sequences, to be pooled over buses running the same NIC and driver.

    Segments of the access sequence between the places the bus marks: a
    service starts at the access that clears INTA# (PCI 3.0 2.2.6: the
    device deasserts INTA# once the driver has served the cause), and a send
    ends at the access the NIC answers by fetching. ``sends``: segments
    ending at a doorbell, not starting a service; ``services``: segments
    starting a service, ending elsewhere; ``both``: starting a service and
    ending at a doorbell; ``gaps``: per service segment, the bus idle time
    (other transactions' time taken out) between its consecutive accesses;
    ``streams``: per bus, every access's key, where services start, which
    accesses the NIC answered by fetching, and how many frames it fetched.
    """

    sends: Counter[tuple[Any, ...]] = field(default_factory=Counter)
    services: Counter[tuple[Any, ...]] = field(default_factory=Counter)
    both: list[tuple[Any, ...]] = field(default_factory=list)
    gaps: dict[tuple[Any, ...], list[list[float]]] = field(default_factory=dict)
    streams: list[tuple[tuple[tuple[Any, ...], ...], frozenset[int], frozenset[int], int]] = field(
        default_factory=list)

    def __add__(self, other: _Evidence) -> _Evidence:
        gaps = {k: self.gaps.get(k, []) + other.gaps.get(k, []) for k in {*self.gaps, *other.gaps}}
        return _Evidence(self.sends + other.sends, self.services + other.services, self.both + other.both, gaps,
                         self.streams + other.streams)


def _anchors(accesses: list[_Access], irq: np.ndarray, fetch_starts: np.ndarray, doorbell_ns: float
             ) -> tuple[dict[int, int], set[int]]:
    """Which access cleared each interrupt (access index -> interrupt number), and which accesses the NIC answered
    with a fetch within ``doorbell_ns`` (the last access ending before the fetch began)."""
    completed = np.array([float(a.end_ns) for a in accesses])
    begun = np.array([a.start_ns for a in accesses])
    cleared: dict[int, int] = {}
    for n, (a, d) in enumerate(zip(irq["t_ns"].astype(float), irq["t_end_ns"].astype(float))):
        k = int(np.searchsorted(begun, d, "right")) - 1  # the access in progress (or last begun) when INTA# rose
        if k >= 0 and completed[k] >= a and k not in cleared:
            cleared[k] = n
    rang = set()
    for f in fetch_starts:
        k = int(np.searchsorted(completed, f, "right")) - 1
        if k >= 0 and f - completed[k] <= doorbell_ns:
            rang.add(k)
    return cleared, rang


def _least_cpu_time_ns(before: _Access, after: _Access, begun: np.ndarray) -> float:
    """The least time (ns) the CPU can have spent between two of its register accesses, from what the bus
    shows between them (``begun``: every transaction's start, the pci table in time order).

    With the bus idle in between, the whole gap. With other masters' transactions in between (a NIC's DMA
    bursts), up to the start of the last of them: the arbiter must be fair (PCI 3.0 3.4), so once the host
    bridge asks for the bus a NIC alone with it on the bus wins it at most once more, and the CPU's access
    had not been asked for when the last one won it. Idle time alone would undercount a CPU that worked while DMA held
    the bus; the whole gap would overcount one whose access waited for a burst.
    """
    last = after.rows[0] - 1
    return (begun[last] if last > before.rows[-1] else after.start_ns) - before.end_ns


def _evidence(accesses: list[_Access], cleared: dict[int, int], rang: set[int], fetches: int,
              begun: np.ndarray) -> _Evidence:
    """Cut the accesses at the anchors and count what lies between (see :class:`_Evidence`)."""
    ev = _Evidence(streams=[(tuple(a.key for a in accesses), frozenset(cleared), frozenset(rang), fetches)])
    start = 0
    n = len(accesses)
    for k in range(n + 1):
        end_here = k == n or k + 1 in cleared or k in rang
        if k < n and not end_here:
            continue
        seg = list(range(start, min(k + 1, n)))
        start = k + 1
        if not seg:
            continue
        keys = tuple(accesses[i].key for i in seg)
        service, doorbell = seg[0] in cleared, seg[-1] in rang
        if doorbell and not service:
            ev.sends[keys] += 1
        elif service and not doorbell:
            ev.services[keys] += 1
            ev.gaps.setdefault(keys, []).append([_least_cpu_time_ns(accesses[i], accesses[j], begun)
                                                  for i, j in zip(seg, seg[1:])])
        elif service and doorbell:
            ev.both.append(keys)
    return ev


def _commonest(seen: Counter[tuple[Any, ...]]) -> tuple[Any, ...] | None:
    """The commonest sequence, when it is clearly so: seen at least twice and at least half the time."""
    if not seen:
        return None
    keys, count = seen.most_common(1)[0]
    return keys if count >= 2 and 2 * count >= sum(seen.values()) else None


def _send_by_count(ev: _Evidence, service: tuple[Any, ...]) -> tuple[Any, ...] | None:
    """The send setup as what is left of the accesses once the services are taken out: every frame the NIC
    fetched had one, so the rest falls into as many equal setups as there were fetches (a run the services
    did not interrupt into a whole number of them).

    A driver that starts its transmit queue only when the queue is idle (sk98lin's XmitFrame writes Q_CSR
    then, and otherwise leaves the NIC to read the next descriptor by itself) makes fewer setups than
    frames: the rest then is its setups when the NIC answered every run of it by fetching (at once, or
    after the service that came between) and all are the same, however few (one, for a stream whose
    queue never idles). None where neither holds."""
    runs: list[tuple[tuple[tuple[Any, ...], ...], bool]] = []  # keys, whether the run ends at a doorbell
    fetched = 0
    for keys, starts, doorbells, fetches in ev.streams:
        fetched += fetches
        first = i = 0
        while i <= len(keys):
            if i == len(keys) or (i in starts and keys[i:i + len(service)] == service):
                # the NIC answers a setup at once, or after the service that came before it could
                runs.append((keys[first:i], any(k in doorbells for k in range(i - 1, i + len(service)))))
                i += len(service) if i < len(keys) else 1
                first = i
            else:
                i += 1
    rest = sum(len(r) for r, _ in runs)
    if fetched == 0 or rest == 0:
        return None
    if rest % fetched == 0:
        size = rest // fetched
        return _commonest(Counter(r[k:k + size] for r, _ in runs if len(r) % size == 0
                                  for k in range(0, len(r), size)))
    setups = [(r, rung) for r, rung in runs if r]
    if len(setups) < fetched and all(rung for _, rung in setups) and len({r for r, _ in setups}) == 1:
        return setups[0][0]
    return None


def driver_sequences(ev: _Evidence) -> DriverSequences | None:
    """The driver's send, service and update sequences from the evidence of one or more buses; None when the
    capture does not show them clearly (too few sends or services standing alone).

    The service is the commonest run of accesses from one that cleared INTA#
    to the next place the bus marks; the send, what the services leave,
    shared out over the frames fetched (or else the commonest run that
    ended at a doorbell).
    """
    service = _commonest(ev.services)
    send = _send_by_count(ev, service) if service is not None else None
    send = send or _commonest(ev.sends)
    if send is None and service is not None:
        send = _commonest(Counter(b[len(service):] for b in ev.both if b[:len(service)] == service
                                  and len(b) > len(service)))
    if service is None and send is not None:
        service = _commonest(Counter(b[:-len(send)] for b in ev.both if b[-len(send):] == send and len(b) > len(send)))
    if send is None or service is None:
        return None
    if len(service) == 1:
        return DriverSequences(send, service, ())
    # The service's first accesses and its later ones are apart by the CPU's work between them, which grows
    # with the frames a service handles: where the CPU spent longest in the busier services (the 90th
    # percentile over the services seen; a posted write lets the CPU go on at once, so an idle service's
    # gaps tell little). Where no gap stands out, the service stays whole rather than be cut at a guess.
    gaps = np.array(ev.gaps.get(service, []), dtype=np.float64).reshape(-1, len(service) - 1)
    if not gaps.size:
        return DriverSequences(send, service[:1], service[1:])
    longest = np.percentile(gaps, SERVICE_GAP_PERCENTILE, axis=0)
    cut = 1 + int(np.argmax(longest))
    if len(longest) > 1 and np.sort(longest)[-2] * SERVICE_CUT_MARGIN > longest[cut - 1]:
        return DriverSequences(send, service, (), uncut=True)
    return DriverSequences(send, service[:cut], service[cut:])


@dataclass(frozen=True)
class _Layout:
    """A bus's tables in time order, its transfers, its register accesses and runs before they are labelled, and
    what they show of the driver's sequences. ``accesses`` and ``evidence`` leave out the ``refills``
    (:func:`_refill_runs`), which are labelled apart."""

    pci: np.ndarray
    irq: np.ndarray
    transfers: list[Transfer]
    clearing: np.ndarray
    runs: list[Run]
    keys: list[tuple[Any, ...]]
    sends_seen: Counter[tuple[Any, ...]]
    accesses: list[_Access]
    cleared: dict[int, int]
    evidence: _Evidence
    refills: list[Run]


def _refill_runs(pci: np.ndarray, runs: list[Run], accesses: list[_Access], cleared: dict[int, int],
                 transfers: list[Transfer], doorbell_ns: float, registers: RegisterMap | None) -> list[Run]:
    """The runs of register accesses that hand receive descriptors back to the NIC: the ring's refill.

    A driver returns the descriptors of received frames by writing the
    receive ring's tail (Intel 8254x SDM §3.2.6: RDT; SysKonnect: the receive
    queue's Q_CSR; Alteon: RxStdPrd), in the service's update or, where the
    stack runs after the service (Linux 2.4's NET_RX softirq and the e1000's
    refill tasklet), on its own once the stack has taken the frames: then a
    refill can fall just before the next send's setup, and must not be
    counted in it. With AD probed and the controller's ``registers`` known, a
    run of writes to a receive tail register is a refill. Otherwise the bus
    shows a refill as a run of the same access repeated (one tail register;
    a write where the command was probed) that cleared no interrupt, is not
    the run just after a service (the service's update goes there), met no
    fetch (none in progress, none beginning within ``doorbell_ns`` of it: no
    doorbell, nor a send whose fetch waits for the one before) and came after
    a frame was received since the last refill.
    """
    if not runs:
        return []
    of_row = {r: k for k, a in enumerate(accesses) for r in a.rows}
    known = _address_known(pci)
    offsets = registers.offsets(pci["address"]) if registers is not None else None
    write = np.isin(pci["command"], WRITE_COMMANDS)
    fetches = np.array(sorted((t.start_ns, t.end_ns) for t in transfers if t.role == "fetch")).reshape(-1, 2)
    fetch_starts = fetches[:, 0]
    # the latest end of the fetches begun so far: a fetch is in progress at t when the reach before t passes it
    fetch_reach = np.maximum.accumulate(fetches[:, 1]) if len(fetches) else fetches[:, 1]
    receive_ends = np.sort([t.end_ns for t in transfers if t.role == "receive"])
    out: list[Run] = []
    last_end = -math.inf
    after_service = False
    for rows, start, end in runs:
        done = sorted({of_row[r] for r in rows if r in of_row})
        served = any(k in cleared for k in done)
        final = [accesses[k].rows[-1] for k in done]
        if offsets is not None and final and known[final].all():
            refill = bool(write[final].all() and all(int(offsets[r]) in registers.receive_tail for r in final))
        else:
            same = len({accesses[k].key for k in done}) == 1
            probed = pci["command"][final] != b""
            begun = int(np.searchsorted(fetch_starts, end, "right"))
            rang = (int(np.searchsorted(fetch_starts, end + doorbell_ns, "right"))
                    > int(np.searchsorted(fetch_starts, start, "left"))) or (begun > 0
                                                                          and fetch_reach[begun - 1] >= start)
            received = bool(np.searchsorted(receive_ends, start, "left")
                            > np.searchsorted(receive_ends, last_end, "right"))
            refill = (same and bool(write[final][probed].all()) and not served and not after_service
                      and not rang and received)
        if refill:
            out.append((rows, start, end))
            last_end = end
        after_service = served
    return out


def _layout(pci: np.ndarray, irq: np.ndarray | None, frames_in: np.ndarray | None, frames_out: np.ndarray | None,
            dma_gap_ns: float, csr_gap_ns: float, doorbell_ns: float, descriptor_max_bytes: int,
            registers: RegisterMap | None = None) -> _Layout:
    pci = np.sort(pci, order="t_ns", kind="stable")
    irq = np.sort(irq, order="t_ns") if irq is not None else np.zeros(0, dtype=[("t_ns", "<i8"), ("t_end_ns", "<i8")])
    transfers = _transfers(pci, frames_in, frames_out, gap_ns=dma_gap_ns, descriptor_max=descriptor_max_bytes)
    fetch_starts = np.array([t.start_ns for t in transfers if t.role == "fetch"])
    keys = _access_keys(pci)
    accesses = _completed_accesses(pci, keys)
    cleared, rang = _anchors(accesses, irq, fetch_starts, doorbell_ns)
    # A service begins with the first attempt of the access that cleared INTA#: its retries are no run of their own.
    clearing = np.full(len(irq), np.nan)
    for k, n in cleared.items():
        clearing[n] = accesses[k].start_ns
    runs, whole = _clusters(pci, csr_gap_ns, np.concatenate([fetch_starts, clearing[np.isfinite(clearing)]]))
    refills = _refill_runs(pci, runs, accesses, cleared, transfers, doorbell_ns, registers)
    if refills:
        # The refills are no part of the driver's send, service or update sequences: learnt and labelled without them.
        taken = {r for rows, _, _ in refills for r in rows}
        accesses = [a for a in accesses if a.rows[-1] not in taken]
        cleared, rang = _anchors(accesses, irq, fetch_starts, doorbell_ns)
    return _Layout(pci, irq, transfers, clearing, runs, keys,
                   _send_sequences(runs, whole, keys, fetch_starts, doorbell_ns), accesses, cleared,
                   _evidence(accesses, cleared, rang, len(fetch_starts), pci["t_ns"].astype(np.float64)), refills)


def _labelled(lay: _Layout, seqs: DriverSequences) -> BusActivity:
    """Label a bus's register accesses with the driver's sequences: at each access that cleared INTA# the
    service's first accesses (then its update), elsewhere a send setup or an update where its keys match, the
    rest ``other``; each fetch takes the send setups in order, first come first fetched."""
    pci, accesses, transfers = lay.pci, lay.accesses, lay.transfers
    keys = [a.key for a in accesses]

    def matches(seq: tuple[tuple[Any, ...], ...], i: int) -> bool:
        return bool(seq) and tuple(keys[i:i + len(seq)]) == seq

    spans: list[tuple[str, int, int, int]] = []  # role, first access, end (exclusive), interrupt
    i, n = 0, len(accesses)
    while i < n:
        if i in lay.cleared and matches(seqs.service, i):
            spans.append(("interrupt", i, i + len(seqs.service), lay.cleared[i]))
            i += len(seqs.service)
            if matches(seqs.update, i):
                spans.append(("update", i, i + len(seqs.update), spans[-1][3]))
                i += len(seqs.update)
        elif matches(seqs.send, i):
            spans.append(("send", i, i + len(seqs.send), -1))
            i += len(seqs.send)
        elif matches(seqs.update, i):
            spans.append(("update", i, i + len(seqs.update), -1))
            i += len(seqs.update)
        else:
            if spans and spans[-1][0] == "other" and spans[-1][2] == i:
                spans[-1] = ("other", spans[-1][1], i + 1, -1)
            else:
                spans.append(("other", i, i + 1, -1))
            i += 1
    retry = pci["termination"] == b"retry"
    linked_transfer = [-1] * len(spans)
    floor = -math.inf
    for t, tr in enumerate(transfers):
        if tr.role != "fetch":
            continue
        waiting = [k for k, (role, a, b, _) in enumerate(spans) if role == "send" and linked_transfer[k] < 0
                   and accesses[a].start_ns > floor and accesses[b - 1].end_ns <= tr.start_ns]
        if waiting:
            linked_transfer[waiting[0]] = t
            floor = accesses[spans[waiting[0]][1]].start_ns
    clusters = []
    for k, (role, a, b, it) in enumerate(spans):
        rows = tuple(r for acc in accesses[a:b] for r in acc.rows)
        clusters.append(CsrCluster(role, rows, accesses[a].start_ns, accesses[b - 1].end_ns,
                                   int((~retry[list(rows)]).sum()), int(retry[list(rows)].sum()),
                                   linked_transfer[k], it))
    clusters += [CsrCluster("refill", tuple(rows), s, e, int((~retry[rows]).sum()), int(retry[rows].sum()))
                 for rows, s, e in lay.refills]
    clusters.sort(key=lambda c: c.start_ns)
    service = {c.interrupt: k for k, c in enumerate(clusters) if c.role == "interrupt"}
    update = {c.interrupt: k for k, c in enumerate(clusters) if c.role == "update" and c.interrupt >= 0}
    interrupts = [Interrupt(a, d, c, service.get(n_irq, -1), update.get(n_irq, -1))
                  for n_irq, (a, d, c) in enumerate(_interrupts_and_causes(transfers, lay.irq, pci))]
    return BusActivity(clock_period_ns(pci), tuple(transfers), tuple(clusters), tuple(interrupts), seqs.uncut)


def bus_activity(pci: np.ndarray, irq: np.ndarray | None = None, frames_in: np.ndarray | None = None,
                 frames_out: np.ndarray | None = None, *, dma_gap_ns: float = DMA_GAP_NS,
                 csr_gap_ns: float = CSR_GAP_NS, doorbell_ns: float = DOORBELL_NS,
                 descriptor_max_bytes: int = DESCRIPTOR_MAX_BYTES,
                 registers: RegisterMap | None = None) -> BusActivity:
    """One host's bus as transfers, CSR clusters and interrupts.

    ``pci``: the bus's decoded ``pci`` table; ``irq``: its ``irq`` table
    (INTA#), or None; ``frames_in`` / ``frames_out``: the data frames
    (:func:`data_frames`) reaching / leaving this host, or None without a
    probe (then only the decoded commands tell transfers apart);
    ``registers``: the NIC's register map (:mod:`nicrig.analysis.nic_registers`),
    which names the accesses where AD was probed.
    """
    lay = _layout(pci, irq, frames_in, frames_out, dma_gap_ns, csr_gap_ns, doorbell_ns, descriptor_max_bytes,
                  registers)
    seqs = driver_sequences(lay.evidence)
    return _labelled(lay, seqs) if seqs is not None else _activity(lay, _majority(lay.sends_seen), doorbell_ns)


def _interrupts_and_causes(transfers: list[Transfer], irq: np.ndarray, pci: np.ndarray
                           ) -> list[tuple[float, float, float]]:
    """Each INTA# low interval of ``irq`` (assert, deassert, ns) with the end of the DMA that caused it
    (:func:`first_causes`, over the transfers that give a NIC reason to interrupt: receives, writebacks)."""
    asserts, deasserts = irq["t_ns"].astype(float), irq["t_end_ns"].astype(float)
    causes = first_causes(np.array([t.end_ns for t in transfers if t.role in ("receive", "writeback")]), asserts,
                          deasserts, AT_ONCE_CLOCKS * clock_period_ns(pci))
    return list(zip(asserts.tolist(), deasserts.tolist(), causes))


def first_causes(cause_ends_ns: np.ndarray, asserts_ns: np.ndarray, deasserts_ns: np.ndarray,
                 at_once_ns: float) -> list[float]:
    """For each INTA# low interval (``asserts_ns``, ``deasserts_ns``, in order), the end of the first DMA that gave
    the NIC a reason to raise it (a received frame, a sent frame's writeback: ``cause_ends_ns``), NaN if none.

    An interrupt asserted within ``at_once_ns`` of a DMA's end is a NIC's interrupt at once: a frame done while the
    interrupt before was still asserted was that one's (its service read the cause), so its reason is the first
    DMA after the interrupt before was cleared. One asserted later is a coalescence timer's, and a frame done after
    the interrupt before was raised, before its service read the cause, has started it (Intel 8254x RADV/TADV, the
    Tigon's ticks: the NIC's timers do not wait for the host).
    """
    ends = np.sort(cause_ends_ns)
    hi = np.searchsorted(ends, asserts_ns, side="right")
    at_once = np.array([j > 0 and a - ends[j - 1] <= at_once_ns for a, j in zip(asserts_ns, hi)], dtype=bool)
    since = np.where(at_once, np.concatenate([[-math.inf], deasserts_ns[:-1]]),
                     np.concatenate([[-math.inf], asserts_ns[:-1]]))
    lo = np.searchsorted(ends, since, side="right")
    return [float(ends[i]) if i < j else math.nan for i, j in zip(lo, hi)]


def _activity(lay: _Layout, signature: tuple[Any, ...] | None, doorbell_ns: float) -> BusActivity:
    """Label a bus's register runs, given the driver's send sequence (if known) and the interrupts: the fallback
    where the driver's sequences could not be learnt (:func:`driver_sequences` found none), which the activity
    says (``sequences_unlearnt``) so that a report can say its CSR figures are runs, not sequences."""
    pci, irq, transfers, clearing, keys = lay.pci, lay.irq, lay.transfers, lay.clearing, lay.keys
    runs = _split_at(lay.runs, keys, signature, pci) if signature is not None else lay.runs
    refill_rows = {r for rows, _, _ in lay.refills for r in rows}
    roles = ["refill" if refill_rows.issuperset(rows) else "other" for rows, _, _ in runs]
    is_send = [signature is not None and tuple(keys[i] for i in rows) == signature for rows, _, _ in runs]
    linked_transfer = [-1] * len(runs)
    linked_interrupt = [-1] * len(runs)
    starts = np.array([r[1] for r in runs])
    ends = np.array([r[2] for r in runs])
    retry = pci["termination"] == b"retry"

    interrupts: list[Interrupt] = []
    for n, (a, d, c) in enumerate(_interrupts_and_causes(transfers, irq, pci)):
        k = int(np.searchsorted(starts, clearing[n])) if np.isfinite(clearing[n]) else -1
        if k >= 0:
            roles[k], linked_interrupt[k] = "interrupt", n
        interrupts.append(Interrupt(a, d, c, k, -1))
    fetches = [n for n, t in enumerate(transfers) if t.role == "fetch"]
    if signature is None:
        # A doorbell the NIC answered at once: the last cluster just before the fetch.
        for n in fetches:
            before = np.flatnonzero((ends <= transfers[n].start_ns) & (transfers[n].start_ns - ends <= doorbell_ns))
            if before.size and roles[before[-1]] == "other":
                roles[before[-1]], linked_transfer[before[-1]] = "send", n
    # The service's later accesses: the first other cluster after its first ones, before the next service.
    services = [it.service_cluster for it in interrupts if it.service_cluster >= 0] + [len(runs)]
    for n, it in enumerate(interrupts):
        if it.service_cluster < 0:
            continue
        limit = min(k for k in services if k > it.service_cluster)
        after = [k for k in range(it.service_cluster + 1, limit) if roles[k] == "other" and not is_send[k]]
        if after:
            roles[after[0]], linked_interrupt[after[0]] = "update", n
            interrupts[n] = Interrupt(it.assert_ns, it.deassert_ns, it.cause_end_ns, it.service_cluster, after[0])
    # The driver's setups in order, each answered by the next fetch: at once, or later when the NIC's
    # transmit FIFO was full or the setups of a fragmented message came in a row. First come, first fetched.
    floor = -math.inf
    for n in fetches:
        if n in linked_transfer:
            floor = starts[linked_transfer.index(n)]
            continue
        waiting = [k for k in range(len(runs)) if roles[k] == "other" and starts[k] > floor
                   and ends[k] <= transfers[n].start_ns and (is_send[k] or signature is None)]
        if waiting:
            roles[waiting[0]], linked_transfer[waiting[0]] = "send", n
            floor = starts[waiting[0]]
    clusters = tuple(
        CsrCluster(roles[k], tuple(rows), s, e, int((~retry[rows]).sum()), int(retry[rows].sum()),
                   linked_transfer[k], linked_interrupt[k])
        for k, (rows, s, e) in enumerate(runs))
    return BusActivity(clock_period_ns(pci), tuple(transfers), clusters, tuple(interrupts), sequences_unlearnt=True)


@dataclass(frozen=True)
class DmaTiming:
    """The NIC's DMA (Hughes-Jones et al. 2003, §4.1.3: ~3 us for 1400 bytes on 64/66; 6.2.3: 2.9 us received).

    ``peak_mbytes_per_s`` is one bus word per clock; ``burst_data_rate`` the
    rate during data phases (below the peak only if waits break up the
    data); ``burst_rate`` includes each burst's address phase and waits;
    per-frame rates include the gaps between bursts.
    """

    clock_period_ns: float
    bus_width_bytes: int
    peak_mbytes_per_s: float
    burst_data_rate_mbytes_per_s: float
    burst_rate_mbytes_per_s: float
    burst_us: Spread
    burst_bytes: Spread
    fetch_us: Spread
    #: A fetch's frame data alone: its first word to the fetch's end (Hughes-Jones et al. 2003, §4.2.3:
    #: "0.25 us of DMA data transfer" for a 64-byte request, after its CSR setup).
    fetch_data_us: Spread
    receive_us: Spread
    fetch_rate_mbytes_per_s: Spread
    receive_rate_mbytes_per_s: Spread
    bursts_per_fetch: Spread
    bursts_per_receive: Spread


def dma_timing(activity: BusActivity, pci: np.ndarray) -> DmaTiming:
    """Burst and per-frame DMA durations and rates of a bus (``pci``: the table ``activity`` was built from)."""
    pci = np.sort(pci, order="t_ns", kind="stable")
    dma = pci["kind"] == b"dma"
    nbytes = transaction_bytes(pci)[dma].astype(np.float64)
    duration = (pci["t_end_ns"][dma] - pci["t_ns"][dma]).astype(np.float64)
    phases = pci["data_phases"][dma].astype(np.float64)
    period = activity.clock_period_ns
    width = 8 if dma.any() and pci["wide"][dma].mean() > 0.5 else 4
    moved = phases > 0
    data_time = phases[moved].sum() * period

    def per_frame(role: str) -> tuple[Spread, Spread, Spread]:
        ts = activity.of_role(role)
        return (spread([t.duration_ns / 1000 for t in ts]),
                spread([t.bytes / t.duration_ns * 1000 for t in ts if t.duration_ns > 0]),
                spread([len(t.rows) for t in ts]))

    fetch, fetch_rate, fetch_n = per_frame("fetch")
    recv, recv_rate, recv_n = per_frame("receive")
    return DmaTiming(
        clock_period_ns=period, bus_width_bytes=width, peak_mbytes_per_s=width / period * 1000,
        burst_data_rate_mbytes_per_s=float(nbytes[moved].sum() / data_time * 1000) if data_time else math.nan,
        burst_rate_mbytes_per_s=float(nbytes.sum() / duration.sum() * 1000) if duration.sum() else math.nan,
        burst_us=spread(duration / 1000), burst_bytes=spread(nbytes),
        fetch_us=fetch, fetch_data_us=spread([(t.end_ns - t.data_start_ns) / 1000 for t in activity.of_role("fetch")
                                              if math.isfinite(t.data_start_ns)]),
        receive_us=recv, fetch_rate_mbytes_per_s=fetch_rate, receive_rate_mbytes_per_s=recv_rate,
        bursts_per_fetch=fetch_n, bursts_per_receive=recv_n)


@dataclass(frozen=True)
class CsrTiming:
    """Register accesses (Hughes-Jones et al. 2003, §4.2.3: 1.75 us of CSR setup before a send; §9: "almost
    independent" of the bus).

    ``send_setup_us``: first to last access of the driver's setup before each
    fetch; ``send_to_dma_us``: its end to the fetch's start; ``service_us`` /
    ``update_us``: the interrupt service's first and later clusters;
    ``refill_us`` / ``refill_accesses``: the receive ring's refills outside
    the services (:func:`_refill_runs`).
    """

    send_setup_us: Spread
    send_accesses: Spread
    send_to_dma_us: Spread
    service_us: Spread
    update_us: Spread
    refill_us: Spread
    refill_accesses: Spread
    accesses: int
    retries: int


def csr_timing(activity: BusActivity) -> CsrTiming:
    sends = activity.clusters_of_role("send")
    return CsrTiming(
        send_setup_us=spread([c.duration_ns / 1000 for c in sends]),
        send_accesses=spread([c.accesses for c in sends]),
        send_to_dma_us=spread([(activity.transfers[c.transfer].start_ns - c.end_ns) / 1000 for c in sends]),
        service_us=spread([c.duration_ns / 1000 for c in activity.clusters_of_role("interrupt")]),
        update_us=spread([c.duration_ns / 1000 for c in activity.clusters_of_role("update")]),
        refill_us=spread([c.duration_ns / 1000 for c in activity.clusters_of_role("refill")]),
        refill_accesses=spread([c.accesses for c in activity.clusters_of_role("refill")]),
        accesses=sum(c.accesses for c in activity.clusters), retries=sum(c.retries for c in activity.clusters))


@dataclass(frozen=True)
class InterruptTiming:
    """Interrupts of one host (Hughes-Jones et al. 2003, §4.2.1, 4.2.3, 8; Geist et al. n.d.'s RxAbsIntDelay).

    ``dma_to_interrupt_us`` is the coalescence delay: from the end of the first
    DMA that gave the NIC a reason to interrupt (a received frame, a sent
    frame's writeback) after the previous interrupt was raised, to INTA#.
    ``dma_to_csr_us`` runs to the service's first register access (Hughes-Jones et al. 2003
    4.2.3: "~70 us delay between the PCI transfer and the update of the CSRs").
    """

    interrupts: int
    frames_per_interrupt: float
    received_per_interrupt: float
    sent_per_interrupt: float
    dma_to_interrupt_us: Spread
    interrupt_to_csr_us: Spread
    inta_low_us: Spread
    dma_to_csr_us: Spread
    interrupt_to_update_us: Spread
    interval_us: Spread


def interrupt_timing(activity: BusActivity) -> InterruptTiming:
    its = activity.interrupts
    n = len(its)
    received, sent = len(activity.of_role("receive")), len(activity.of_role("writeback"))
    clusters = activity.clusters

    def start_of(k: int) -> float:
        return clusters[k].start_ns if k >= 0 else math.nan

    asserts = np.array([i.assert_ns for i in its])
    return InterruptTiming(
        interrupts=n,
        frames_per_interrupt=(received + sent) / n if n else math.nan,
        received_per_interrupt=received / n if n else math.nan,
        sent_per_interrupt=sent / n if n else math.nan,
        dma_to_interrupt_us=spread([(i.assert_ns - i.cause_end_ns) / 1000 for i in its]),
        interrupt_to_csr_us=spread([(start_of(i.service_cluster) - i.assert_ns) / 1000 for i in its]),
        inta_low_us=spread([(i.deassert_ns - i.assert_ns) / 1000 for i in its]),
        dma_to_csr_us=spread([(start_of(i.service_cluster) - i.cause_end_ns) / 1000 for i in its]),
        interrupt_to_update_us=spread([(start_of(i.update_cluster) - i.assert_ns) / 1000 for i in its]),
        interval_us=spread(np.diff(asserts) / 1000))


@dataclass(frozen=True)
class WaitStates:
    """Wait states of one kind of transaction (``csr``, ``dma``, ...): totals and per transaction."""

    transactions: int
    master_wait_clocks: int
    target_wait_clocks: int
    master_wait_clocks_per_transaction: float
    target_wait_clocks_per_transaction: float


def wait_states(pci: np.ndarray) -> dict[str, WaitStates]:
    """Master (IRDY#) and target (TRDY#) wait clocks per transaction kind, as the pci decoder counts them."""
    out = {}
    for kind in np.unique(pci["kind"]):
        rows = pci[pci["kind"] == kind]
        m, t = int(rows["master_wait_clocks"].sum()), int(rows["target_wait_clocks"].sum())
        out[kind.decode()] = WaitStates(len(rows), m, t, m / len(rows), t / len(rows))
    return out


@dataclass(frozen=True)
class StopCounts:
    """Transactions a target stopped with STOP# (Hughes-Jones et al. 2003, §6.1.3: "many PCI STOP signals" on CSR
    accesses)."""

    with_stop: int
    retries: int
    disconnects_with_data: int
    disconnects_without_data: int
    target_aborts: int
    csr_with_stop: int
    dma_with_stop: int


def stop_counts(pci: np.ndarray) -> StopCounts:
    term, stop = pci["termination"], pci["stop"]
    return StopCounts(
        with_stop=int(stop.sum()), retries=int((term == b"retry").sum()),
        disconnects_with_data=int((term == b"disconnect_with_data").sum()),
        disconnects_without_data=int((term == b"disconnect_without_data").sum()),
        target_aborts=int((term == b"target_abort").sum()),
        csr_with_stop=int((stop & (pci["kind"] == b"csr")).sum()),
        dma_with_stop=int((stop & (pci["kind"] == b"dma")).sum()))


@dataclass(frozen=True)
class Occupancy:
    """How much of a window the bus was busy (a transaction from address phase to last data phase).

    Hughes-Jones et al. 2003, §4.2.3: at 11 us spacing the sending bus "is
    occupied for ~4.7 us ... ~43% usage": ``busy_per_frame_us`` and
    ``busy_pct``. With frames on the link the window runs from the first
    frame's start to the last one's, ``frames`` periods between them (N frames
    are N - 1 periods): each period holds one frame's bus work whatever the
    phase, so the busy time per period is the busy time per frame and the
    period is the frames' mean spacing on the link.
    """

    window_us: float
    busy_us: float
    busy_pct: float
    frames: int
    busy_per_frame_us: float
    frame_period_us: float


def occupancy(pci: np.ndarray, t0_ns: float, t1_ns: float, frames: int = 0) -> Occupancy:
    """Busy time of the bus within ``[t0_ns, t1_ns)``, in total and per period of the ``frames`` periods of the
    frame spacing it spans."""
    s = np.clip(pci["t_ns"].astype(np.float64), t0_ns, t1_ns)
    e = np.clip(pci["t_end_ns"].astype(np.float64), t0_ns, t1_ns)
    order = np.argsort(s, kind="stable")
    s, e = s[order], e[order]
    # union of intervals: a transaction's busy time counts once even if the table overlaps spans
    reach = np.maximum.accumulate(e) if e.size else e
    prev_reach = np.concatenate([[t0_ns], reach[:-1]]) if e.size else e
    busy = float(np.clip(e - np.maximum(s, prev_reach), 0, None).sum())
    window = t1_ns - t0_ns
    return Occupancy(window / 1000, busy / 1000, 100 * busy / window if window > 0 else math.nan, frames,
                     busy / frames / 1000 if frames else math.nan, window / frames / 1000 if frames else math.nan)


@dataclass(frozen=True)
class HostBus:
    """Every measurement of one host's bus."""

    activity: BusActivity
    dma: DmaTiming
    csr: CsrTiming
    interrupts: InterruptTiming | None
    waits: dict[str, WaitStates]
    stops: StopCounts
    occupancy: Occupancy


def host_bus(activity: BusActivity, pci: np.ndarray, irq: np.ndarray | None, t0_ns: float, t1_ns: float,
             frames: int) -> HostBus:
    """All measurements of one bus (``activity`` from :func:`bus_activity` on these tables); occupancy over
    ``[t0_ns, t1_ns)`` holding ``frames`` frames."""
    return HostBus(activity, dma_timing(activity, pci), csr_timing(activity),
                   interrupt_timing(activity) if irq is not None else None, wait_states(pci), stop_counts(pci),
                   occupancy(pci, t0_ns, t1_ns, frames))


# -- the link ------------------------------------------------------------------------------------

def data_frames(ethernet: np.ndarray, direction: bytes) -> np.ndarray:
    """Frames of ``direction`` (``b"tx"``, ``b"rx"``) that carry data: no MAC control, good FCS; in time order."""
    keep = ((ethernet["direction"] == direction) & (ethernet["ethertype"] != MAC_CONTROL_ETHERTYPE)
            & ethernet["fcs_ok"])
    return np.sort(ethernet[keep], order="t_ns", kind="stable")


def frame_time_on_wire_ns(length_bytes: np.ndarray | int, link_rate_bps: float = 1e9) -> np.ndarray | float:
    """Preamble, SFD and frame (destination to FCS) on the wire (Hughes-Jones et al. 2003, §4.1.3: 11.6 us for 1400
    bytes of data)."""
    return (np.asarray(length_bytes) + PREAMBLE_BYTES) * 8 / link_rate_bps * 1e9


@dataclass(frozen=True)
class WireTiming:
    """Frames of one direction on the link: time on the wire (observed, and from their lengths), spacing, gaps."""

    frames: int
    on_wire_us: Spread
    expected_on_wire_us: Spread
    period_us: Spread
    gap_us: Spread
    span_start_ns: float
    span_end_ns: float


def wire_timing(frames: np.ndarray, link_rate_bps: float = 1e9) -> WireTiming:
    start, end = frames["t_ns"].astype(np.float64), frames["t_end_ns"].astype(np.float64)
    return WireTiming(len(frames), spread((end - start) / 1000),
                      spread(np.asarray(frame_time_on_wire_ns(frames["length"], link_rate_bps)) / 1000),
                      spread(np.diff(start) / 1000), spread((start[1:] - end[:-1]) / 1000),
                      float(start[0]) if len(frames) else math.nan, float(end[-1]) if len(frames) else math.nan)


@dataclass(frozen=True)
class PauseFrame:
    """One PAUSE frame: when, which way, its quanta and the pause they ask; the gap it left the other way."""

    t_ns: float
    direction: str
    quanta: int
    pause_us: float
    gap_us: float
    xon_after_us: float


@dataclass(frozen=True)
class PauseSummary:
    """802.3x flow control on the link (Hughes-Jones et al. 2003, §4.2.3: gaps "approximately every 900 us")."""

    frames: tuple[PauseFrame, ...]
    xoff: int
    xon: int
    quanta: tuple[int, ...]
    pause_us: Spread
    gap_us: Spread
    period_us: Spread
    usual_gap_us: float


def pause_summary(ethernet: np.ndarray, link_rate_bps: float = 1e9) -> PauseSummary:
    """PAUSE frames of both directions, and what each did to the data frames going the other way.

    A PAUSE with quanta > 0 (XOFF) stops the partner after the frame in
    progress for quanta x 512 bit times, or until a PAUSE 0 (XON). Its gap:
    from the end of the last data frame the partner started before the PAUSE
    had arrived to the start of its next one. ``usual_gap_us``: the median gap
    between the partner's data frames otherwise.
    """
    rows = np.sort(ethernet[ethernet["pause_quanta"] >= 0], order="t_ns")
    out: list[PauseFrame] = []
    usual: list[float] = []
    for d in (b"tx", b"rx"):
        mine = rows[rows["direction"] == d]
        other = data_frames(ethernet, b"rx" if d == b"tx" else b"tx")
        o_start, o_end = other["t_ns"].astype(np.float64), other["t_end_ns"].astype(np.float64)
        paused_gaps = set()
        for k, r in enumerate(mine):
            q = int(r["pause_quanta"])
            if q == 0:
                continue
            arrived = float(r["t_end_ns"])
            before = int(np.searchsorted(o_start, arrived, "left")) - 1
            gap = (o_start[before + 1] - o_end[before]) / 1000 if 0 <= before < o_start.size - 1 else math.nan
            if math.isfinite(gap):
                paused_gaps.add(before)
            xon = [float(x["t_end_ns"]) for x in mine[k + 1:] if int(x["pause_quanta"]) == 0]
            nxt = [float(x["t_end_ns"]) for x in mine[k + 1:] if int(x["pause_quanta"]) > 0]
            xon_after = (xon[0] - arrived) / 1000 if xon and (not nxt or xon[0] < nxt[0]) else math.nan
            out.append(PauseFrame(float(r["t_ns"]), d.decode(), q, q * PAUSE_QUANTUM_BITS / link_rate_bps * 1e6,
                                  gap, xon_after))
        if mine.size and (mine["pause_quanta"] > 0).any() and o_start.size > 1:
            gaps = (o_start[1:] - o_end[:-1]) / 1000
            keep = np.ones(gaps.size, bool)
            keep[list(paused_gaps)] = False
            usual += list(gaps[keep])
    out.sort(key=lambda p: p.t_ns)
    periods = [v for d in ("tx", "rx") for v in np.diff([p.t_ns for p in out if p.direction == d]) / 1000]
    return PauseSummary(
        frames=tuple(out), xoff=len(out), xon=int((rows["pause_quanta"] == 0).sum()),
        quanta=tuple(sorted({p.quanta for p in out})), pause_us=spread([p.pause_us for p in out]),
        gap_us=spread([p.gap_us for p in out]), period_us=spread(periods),
        usual_gap_us=float(np.median(usual)) if usual else math.nan)


# -- both buses and the link ---------------------------------------------------------------------

@dataclass(frozen=True)
class FramePath:
    """One frame from the sending host's software to the receiving host's interrupt service (ns; NaN unknown).

    Hughes-Jones et al. 2003, §4.1.3 (SK-9843, 64/66, 1400 bytes): first word on the sending bus
    to first word on the receiving bus 23 us, frame 11.6 us on the wire,
    software send to receive 36 us.
    """

    frame: int
    seq: int
    length_bytes: int
    send_csr_start_ns: float
    send_csr_end_ns: float
    send_first_word_ns: float
    send_dma_end_ns: float
    wire_start_ns: float
    wire_end_ns: float
    recv_first_word_ns: float
    recv_dma_end_ns: float
    recv_interrupt_ns: float
    recv_service_start_ns: float
    recv_service_end_ns: float

    @property
    def csr_setup_us(self) -> float:
        return (self.send_csr_end_ns - self.send_csr_start_ns) / 1000

    @property
    def send_dma_to_wire_us(self) -> float:
        """First word of the frame on the sending bus to its first preamble bit on the wire."""
        return (self.wire_start_ns - self.send_first_word_ns) / 1000

    @property
    def on_wire_us(self) -> float:
        return (self.wire_end_ns - self.wire_start_ns) / 1000

    @property
    def wire_to_recv_dma_us(self) -> float:
        """End of the frame on the wire (at the probe) to its first word on the receiving bus."""
        return (self.recv_first_word_ns - self.wire_end_ns) / 1000

    @property
    def first_word_to_first_word_us(self) -> float:
        return (self.recv_first_word_ns - self.send_first_word_ns) / 1000

    @property
    def recv_dma_to_interrupt_us(self) -> float:
        return (self.recv_interrupt_ns - self.recv_dma_end_ns) / 1000

    @property
    def software_to_service_us(self) -> float:
        """Sending driver's first CSR access to the end of the receiving service's first CSR accesses."""
        return (self.recv_service_end_ns - self.send_csr_start_ns) / 1000


def frame_paths(frames: np.ndarray, sender: BusActivity, receiver: BusActivity) -> list[FramePath]:
    """Follow each of ``frames`` across both buses.

    ``frames`` must be the ``frames_out`` the sender's activity was built with
    and the ``frames_in`` of the receiver's (the same array).
    """
    nan = math.nan
    fetch = {t.frame: (n, t) for n, t in enumerate(sender.transfers) if t.role == "fetch" and t.frame >= 0}
    ring = {c.transfer: c for c in sender.clusters_of_role("send")}
    receive = {t.frame: t for t in receiver.of_role("receive") if t.frame >= 0}
    asserts = np.array([i.assert_ns for i in receiver.interrupts])
    paths = []
    for k, f in enumerate(frames):
        n_out, t_out = fetch.get(k, (-1, None))
        t_in = receive.get(k)
        bell = ring.get(n_out)
        it = None
        if t_in is not None and asserts.size:
            n = int(np.searchsorted(asserts, t_in.end_ns, "left"))
            it = receiver.interrupts[n] if n < asserts.size else None
        svc = receiver.clusters[it.service_cluster] if it is not None and it.service_cluster >= 0 else None
        paths.append(FramePath(
            frame=k, seq=int(f["seq"]), length_bytes=int(f["length"]),
            send_csr_start_ns=bell.start_ns if bell else nan, send_csr_end_ns=bell.end_ns if bell else nan,
            send_first_word_ns=t_out.data_start_ns if t_out else nan, send_dma_end_ns=t_out.end_ns if t_out else nan,
            wire_start_ns=float(f["t_ns"]), wire_end_ns=float(f["t_end_ns"]),
            recv_first_word_ns=t_in.data_start_ns if t_in else nan, recv_dma_end_ns=t_in.end_ns if t_in else nan,
            recv_interrupt_ns=it.assert_ns if it else nan,
            recv_service_start_ns=svc.start_ns if svc else nan, recv_service_end_ns=svc.end_ns if svc else nan))
    return paths


def host_software_time_us(rtt_intercept_us: float, one_way_us: float) -> float:
    """IP stack and application time per node, as Hughes-Jones et al. 2003, §4.1.3 estimate it:
    (intercept - one way) / 2.

    The one-way time runs from the sending driver's CSR setup to the
    receiver's interrupt service (36 us there); the intercept (56 us) is the
    round trip of a zero-length response: "~10 us on each 800 MHz CPU". A
    rough figure: it books the second direction's hardware time to software.
    """
    return (rtt_intercept_us - one_way_us) / 2


@dataclass(frozen=True)
class BusTimeline:
    """A capture set of the rig, measured: both buses, both directions on the link, flow control."""

    send: HostBus | None
    recv: HostBus | None
    wire_out: WireTiming | None
    wire_in: WireTiming | None
    paths_out: tuple[FramePath, ...]
    paths_in: tuple[FramePath, ...]
    pause: PauseSummary | None


def bus_timeline(send_pci: np.ndarray | None, send_irq: np.ndarray | None, recv_pci: np.ndarray | None,
                 recv_irq: np.ndarray | None, ethernet: np.ndarray | None, *, link_rate_bps: float = 1e9,
                 registers: RegisterMap | None = None, **options: float) -> BusTimeline:
    """Measure a capture set of the rig; any table may be None (not recorded or not decoded).

    The probe is at the sending host: its ``tx`` frames leave the sending
    bus and reach the receiving one, ``rx`` frames go the other way.
    Occupancy is taken over the periods between the data frames one way,
    from the first frame's start to the last one's (the whole bus capture
    without a probe, or with fewer than two frames). ``registers``: both NICs' register map
    (:mod:`nicrig.analysis.nic_registers`), for captures with AD probed.
    """
    out = data_frames(ethernet, b"tx") if ethernet is not None else None
    back = data_frames(ethernet, b"rx") if ethernet is not None else None

    def span(pci: np.ndarray) -> tuple[float, float, int]:
        if out is not None and len(out) >= 2:  # N frames: N - 1 whole periods from the first start to the last
            return float(out["t_ns"][0]), float(out["t_ns"][-1]), len(out) - 1
        if len(pci) == 0:
            return 0.0, 0.0, 0
        return float(pci["t_ns"].min()), float(pci["t_end_ns"].max()), 0

    settings = {"dma_gap_ns": DMA_GAP_NS, "csr_gap_ns": CSR_GAP_NS, "doorbell_ns": DOORBELL_NS,
                "descriptor_max_bytes": DESCRIPTOR_MAX_BYTES, **options}
    sides = ((send_pci, send_irq, back, out), (recv_pci, recv_irq, out, back))
    layouts = [_layout(pci, irq, f_in, f_out, **settings, registers=registers)  # type: ignore[arg-type]
               if pci is not None else None for pci, irq, f_in, f_out in sides]
    # Both hosts run the same NIC and driver: their buses together show its register sequences.
    present = [lay for lay in layouts if lay is not None]
    seqs = driver_sequences(sum((lay.evidence for lay in present), _Evidence()))
    signature = _majority(sum((lay.sends_seen for lay in present), Counter()))

    def activity(lay: _Layout) -> BusActivity:
        return _labelled(lay, seqs) if seqs is not None else _activity(lay, signature, settings["doorbell_ns"])

    send, recv = (host_bus(activity(lay), lay.pci, irq, *span(lay.pci))
                  if lay is not None else None for lay, (_, irq, _, _) in zip(layouts, sides))
    paths_out: tuple[FramePath, ...] = ()
    paths_in: tuple[FramePath, ...] = ()
    if send is not None and recv is not None and out is not None and back is not None:
        paths_out = tuple(frame_paths(out, send.activity, recv.activity))
        paths_in = tuple(frame_paths(back, recv.activity, send.activity))
    return BusTimeline(
        send, recv,
        wire_timing(out, link_rate_bps) if out is not None and len(out) else None,
        wire_timing(back, link_rate_bps) if back is not None and len(back) else None,
        paths_out, paths_in, pause_summary(ethernet, link_rate_bps) if ethernet is not None else None)
