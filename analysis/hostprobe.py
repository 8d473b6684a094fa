"""What the host probe's kernel events say about a host's share of a udpmon run.

From a host trace (:class:`nicrig.acquisition.hostprobe.events.HostTrace`):

* interrupts per second and frames per interrupt, and frames per NAPI poll:
  the metrics Geist et al. tuned interrupt coalescence by;
* the delay from a hard interrupt (or, without one, from the softirq raise)
  to the NET_RX softirq that polls the device;
* drops with the kernel's reason (``skb:kfree_skb``);
* per stream point (one size and spacing): interrupts and NET_RX softirqs
  per packet and the share of CPU time in NET_RX, the curves Hughes-Jones
  et al. 2003 §8 drew against spacing for interrupt coalescence.

Times are the trace's (the host's CLOCK_MONOTONIC, ns); functions are pure.
System call numbers are x86-64's (the ``raw_syscalls`` events carry the number).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from nicrig.analysis.quantity import quantile_interval

if TYPE_CHECKING:
    from nicrig.acquisition.hostprobe.events import HostTrace

#: softirq vectors (include/linux/interrupt.h; the trace's own table is in HostTrace.symbols["softirq"]).
NET_TX, NET_RX = 2, 3
#: x86-64 system call numbers (arch/x86/entry/syscalls/syscall_64.tbl).
SENDMMSG, RECVMMSG = 307, 299  # the udpmon engine's calls (udpmon/_engine.c)
SEND_CALLS = {44: "sendto", 46: "sendmsg", SENDMMSG: "sendmmsg", 1: "write"}
RECEIVE_CALLS = {45: "recvfrom", 47: "recvmsg", RECVMMSG: "recvmmsg", 0: "read"}
#: IPv4 + UDP headers: an event's ``len`` is the datagram's payload plus these (net:* see the IP packet).
UDP_IP_BYTES = 28
#: The most a link header adds to ``len`` where the device's header is on (``net_dev_queue``, ``net_dev_xmit``):
#: Ethernet 14, one VLAN tag 18, two 22.
LINK_HEADER_MAX_BYTES = 22
#: Events whose ``len`` holds the link header.
WITH_LINK_HEADER = ("net:net_dev_queue", "net:net_dev_xmit")
#: One softirq run on one CPU (:func:`softirq_spans`), times in ns of the trace clock.
SPAN_DTYPE = np.dtype([("cpu", "<i2"), ("start_ns", "<i8"), ("end_ns", "<i8")])


def span_s(trace: HostTrace) -> float:
    """Seconds the trace covers."""
    return (trace.end_ns - trace.start_ns) / 1e9


def within(rows: np.ndarray, t0_ns: int, t1_ns: int) -> np.ndarray:
    """Rows whose time is in [t0, t1)."""
    return rows[(rows["time_ns"] >= t0_ns) & (rows["time_ns"] < t1_ns)]


def softirq_spans(trace: HostTrace, vector: int) -> np.ndarray:
    """(cpu, start_ns, end_ns) of every run of one softirq vector: each entry paired with the next exit on its CPU.

    An entry without an exit (tracing stopped inside it) is left out."""
    of_vector = trace.events[trace.events["vector"] == vector]
    parts = []
    for cpu in np.unique(of_vector["cpu"]):
        on = of_vector[of_vector["cpu"] == cpu]
        entry = on[on["event"] == trace.code("irq:softirq_entry")]["time_ns"]
        exit_ = on[on["event"] == trace.code("irq:softirq_exit")]["time_ns"]
        k = np.searchsorted(exit_, entry, side="left")
        ok = k < len(exit_)
        part = np.zeros(int(ok.sum()), dtype=SPAN_DTYPE)
        part["cpu"], part["start_ns"], part["end_ns"] = cpu, entry[ok], exit_[k[ok]]
        parts.append(part)
    spans = np.concatenate(parts) if parts else np.zeros(0, dtype=SPAN_DTYPE)
    return spans[np.argsort(spans["start_ns"], kind="stable")]


def busy_share(spans: np.ndarray, t0_ns: int, t1_ns: int, cpus: int) -> float:
    """Share of the CPUs' time in [t0, t1) spent inside ``spans`` (0..1), ``cpus`` CPUs."""
    if t1_ns <= t0_ns or cpus <= 0:
        return math.nan
    start = np.clip(spans["start_ns"], t0_ns, t1_ns)
    end = np.clip(spans["end_ns"], t0_ns, t1_ns)
    return float((end - start).sum()) / ((t1_ns - t0_ns) * cpus)


def device_irqs(trace: HostTrace, device: str | None) -> np.ndarray:
    """Hard interrupt entries of a device: handlers whose name holds the device's (``eth0-TxRx-0`` for eth0);
    every interrupt when no device is named."""
    rows = trace.of("irq:irq_handler_entry")
    if device is None:
        return rows
    return rows[np.char.find(rows["device"], device.encode()) >= 0]


def trigger_delays(trace: HostTrace, device: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(hard IRQ -> NET_RX softirq delays, softirq raise -> NET_RX softirq delays), ns.

    For each NET_RX softirq run on a CPU: the last hard interrupt of the device (:func:`device_irqs`) entered
    on that CPU since the previous NET_RX run (the NIC's interrupt that scheduled the poll), and the last
    NET_RX raise there (every poll has one: the interrupt's, or the stack's own when a packet is queued in
    software, as on veth and loopback). A run with no interrupt before it contributes only to the second."""
    irq_d, raise_d = [], []
    ev = trace.events
    irq_rows = device_irqs(trace, device)
    for cpu in np.unique(ev["cpu"]):
        mine = ev[ev["cpu"] == cpu]
        entries = mine[(mine["event"] == trace.code("irq:softirq_entry")) & (mine["vector"] == NET_RX)]["time_ns"]
        raises = mine[(mine["event"] == trace.code("irq:softirq_raise")) & (mine["vector"] == NET_RX)]["time_ns"]
        irqs = irq_rows[irq_rows["cpu"] == cpu]["time_ns"]
        previous = np.concatenate(([np.iinfo(np.int64).min], entries[:-1]))
        for times, out in ((irqs, irq_d), (raises, raise_d)):
            if not len(times):
                continue
            k = np.searchsorted(times, entries, side="right") - 1
            ok = (k >= 0)
            ok[ok] &= times[k[ok]] > previous[ok]
            out.append(entries[ok] - times[k[ok]])
    cat = (lambda parts: np.concatenate(parts) if parts else np.zeros(0, np.int64))
    return cat(irq_d), cat(raise_d)


def polls(trace: HostTrace, device: str | None = None) -> np.ndarray:
    """NAPI poll rows (``work`` frames of at most ``budget``), of one device's NAPI contexts when named.

    Software queues (veth, loopback: the per-CPU backlog) poll under the name the kernel gives them."""
    rows = trace.of("napi:napi_poll")
    return rows if device is None else rows[rows["device"] == device.encode()]


@dataclass(frozen=True)
class PollStats:
    """Frames per NAPI poll: over the polls that took any (``mean``), the largest, the empty polls."""

    polls: int
    empty: int
    mean_frames: float
    max_frames: int
    budget: int


def poll_stats(rows: np.ndarray) -> PollStats:
    """Frames per poll of ``napi_poll`` rows (Geist et al.: packets per interrupt, here per poll)."""
    work = rows["work"][rows["work"] >= 0]
    busy = work[work > 0]
    return PollStats(polls=int(len(work)), empty=int((work == 0).sum()),
                     mean_frames=float(busy.mean()) if len(busy) else math.nan,
                     max_frames=int(work.max()) if len(work) else 0,
                     budget=int(rows["budget"].max()) if len(rows) else 0)


def packets(trace: HostTrace, event: str, device: str | None, payload_bytes: int | None = None) -> np.ndarray:
    """A device's (None: every device's) packets at one point of the stack (``net:netif_receive_skb``,
    ``net:net_dev_xmit``...), of one UDP payload size when given (``len`` = payload + 28, plus the link
    header where the event's length holds it)."""
    rows = trace.of(event)
    if device is not None:
        rows = rows[rows["device"] == device.encode()]
    if payload_bytes is not None:
        least = payload_bytes + UDP_IP_BYTES
        most = least + (LINK_HEADER_MAX_BYTES if event in WITH_LINK_HEADER else 0)
        rows = rows[(rows["len"] >= least) & (rows["len"] <= most)]
    return rows


def drops(trace: HostTrace, t0_ns: int | None = None, t1_ns: int | None = None) -> dict[str, int]:
    """Packets the kernel dropped, by its reason (``skb:kfree_skb``), most first."""
    rows = trace.of("skb:kfree_skb")
    if t0_ns is not None and t1_ns is not None:
        rows = within(rows, t0_ns, t1_ns)
    names = trace.symbols.get("drop_reason", {})
    reasons, counts = np.unique(rows["reason"], return_counts=True)
    pairs = sorted(((names.get(int(r), f"reason {int(r)}"), int(c)) for r, c in zip(reasons, counts)),
                   key=lambda p: -p[1])
    return dict(pairs)


@dataclass(frozen=True)
class Delivery:
    """The stream's packets matched to the NET_RX softirq runs and NAPI polls that delivered them.

    ``receive_ns``: each matched packet's ``netif_receive_skb`` time; ``poll``: index into ``polls`` of
    the poll it was delivered in (the first poll on its CPU that ended after it), ``softirq``: whether
    the receive lies inside a NET_RX softirq run."""

    receive_ns: np.ndarray
    poll: np.ndarray
    softirq: np.ndarray
    polls: np.ndarray


def deliveries(trace: HostTrace, device: str | None, payload_bytes: int, t0_ns: int, t1_ns: int) -> Delivery:
    """Match one stream point's packets on the receiving host (every device's when None) to the NET_RX runs and
    NAPI polls that delivered them (the report's per-point table); times on this host's clock."""
    rx = within(packets(trace, "net:netif_receive_skb", device, payload_bytes), t0_ns, t1_ns)
    all_polls = polls(trace)
    poll_index = np.full(len(rx), -1, dtype=np.int64)
    for cpu in np.unique(rx["cpu"]):
        at = np.flatnonzero(all_polls["cpu"] == cpu)
        k = np.searchsorted(all_polls["time_ns"][at], rx["time_ns"][rx["cpu"] == cpu], side="left")
        poll_index[rx["cpu"] == cpu] = np.where(k < len(at), at[np.minimum(k, len(at) - 1)], -1)
    spans = softirq_spans(trace, NET_RX)
    inside = np.zeros(len(rx), dtype=bool)
    for cpu in np.unique(rx["cpu"]):
        mine = spans[spans["cpu"] == cpu]
        t = rx["time_ns"][rx["cpu"] == cpu]
        k = np.searchsorted(mine["start_ns"], t, side="right") - 1
        ok = k >= 0
        ok[ok] &= mine["end_ns"][k[ok]] >= t[ok]
        inside[rx["cpu"] == cpu] = ok
    return Delivery(receive_ns=rx["time_ns"], poll=poll_index, softirq=inside, polls=all_polls)


@dataclass(frozen=True)
class PointLoad:
    """One stream point on one host: interrupts, NET_RX softirq runs and polls per packet, NET_RX CPU share."""

    packets: int
    interrupts_per_packet: float
    net_rx_per_packet: float
    frames_per_poll: float
    net_rx_cpu_pct: float


def point_load(trace: HostTrace, device: str | None, payload_bytes: int, t0_ns: int, t1_ns: int,
               packet_event: str) -> PointLoad:
    """The per-spacing quantities of Hughes-Jones et al. 2003 §8 for the window of one point (this host's clock).

    ``packet_event``: ``net:netif_receive_skb`` on a receiver, ``net:net_dev_xmit`` on a sender."""
    n = len(within(packets(trace, packet_event, device, payload_bytes), t0_ns, t1_ns))
    irqs = len(within(device_irqs(trace, device), t0_ns, t1_ns))
    spans = softirq_spans(trace, NET_RX)
    runs = spans[(spans["start_ns"] >= t0_ns) & (spans["start_ns"] < t1_ns)]
    cpus = max(int(len(trace.losses)), 1)
    ps = poll_stats(within(polls(trace), t0_ns, t1_ns))
    per = (lambda x: x / n if n else math.nan)
    return PointLoad(packets=n, interrupts_per_packet=per(irqs), net_rx_per_packet=per(len(runs)),
                     frames_per_poll=ps.mean_frames, net_rx_cpu_pct=100 * busy_share(spans, t0_ns, t1_ns, cpus))


def quantile_us(values_ns: np.ndarray, q: float, step_ns: float = 1.0) -> tuple[float, float]:
    """The ``q``-quantile of delays given in ns, and its 95% half-width, both in us (NaN: no values; half-width
    NaN where there are too few for a two-sided interval); ``step_ns``: the delays' resolution
    (:func:`nicrig.analysis.quantity.quantile_interval`)."""
    value, half = quantile_interval(values_ns, q, step_ns)
    return value / 1000, half / 1000


def quantiles_us(values_ns: np.ndarray) -> tuple[float, float, int]:
    """(median us, 90th percentile us, count) of delays given in ns; the quantiles are NaN when there are none."""
    if not len(values_ns):
        return math.nan, math.nan, 0
    q = np.percentile(values_ns, [50, 90]) / 1000
    return float(q[0]), float(q[1]), int(len(values_ns))
