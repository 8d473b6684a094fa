"""Each udpmon datagram's path through a host's kernel: the host probe's events joined to the engine's records.

The stream engine records every datagram (``stream/sent``: sequence number and the clock read before the
``sendmmsg()`` that sent it; ``stream/received``: sequence number, length and the clock read after the
``recvmmsg()`` that returned it) and the threads that ran its loops (``stream/points``: ``send_thread``,
``recv_thread``). The kernel's events name socket buffers (``skbaddr``) and sockets (``sk``), never a
sequence number. They are joined here only through what holds for one datagram, never by nearness in time:

Sending host
  * the engine reads its clock and at once calls ``sendmmsg()`` on its thread: a batch's call is that
    thread's first successful ``sendmmsg`` entered at or after the batch's time and before the next batch's,
    and it must have sent as many datagrams as the batch holds;
  * the kernel handles the call's messages in order, each ending with ``sock:sock_send_length`` (socket and
    length): a datagram's buffer is the one ``net:net_dev_queue`` of its length (payload, IP and UDP headers
    and at most a link header) on the engine's thread inside its message;
  * its device transmit is the next ``net:net_dev_xmit`` of that buffer address, before the address is queued
    again.

Receiving host
  * the engine reads its clock right after ``recvmmsg()`` returns: a batch's call is its thread's last
    ``recvmmsg`` that returned before the batch's time and after the previous batch's, and it must have
    returned exactly the batch's datagrams (one that also returned datagrams the engine rejected cannot say
    which are which);
  * each message the call returned is a ``sock:sock_recv_length`` (socket, and the length the engine
    recorded); a UDP socket's queue is first in, first out, so the k-th datagram the socket returned is the
    k-th queued on it, checked between each two reads that found the queue empty (as many returned as
    queued between them): a stretch that does not line up is refused alone, the next empty read starts afresh;
  * the stack delivers one buffer at a time on a CPU, from ``net:netif_receive_skb`` to the socket's
    queue and its wake-up (``sock:sk_data_ready``) with nothing between: the queued buffer is the last
    ``netif_receive_skb`` on that CPU before the wake-up, of the datagram's length, and the only one of that
    length since the CPU's previous wake-up of any socket (a driver that hands a list of buffers up before
    delivering any is refused so, as is a buffer following a dropped one of the same length);
  * a datagram was queued between its ``netif_receive_skb`` and its wake-up: where those spans of two
    datagrams on different CPUs meet (two CPUs' events of one nanosecond have no order), their order on the
    socket is unknown and neither is paired.

Every datagram that cannot be joined so is counted with its reason; no delay is derived from it. Times are
the host's CLOCK_MONOTONIC in ns (trace and engine share it). System call numbers are x86-64's.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from errno import EAGAIN
from typing import TYPE_CHECKING

import numpy as np

from nicrig.analysis.hostprobe import LINK_HEADER_MAX_BYTES, RECVMMSG, SENDMMSG, UDP_IP_BYTES

if TYPE_CHECKING:
    from nicrig.acquisition.hostprobe.events import HostTrace


SENT_PATH_DTYPE = np.dtype([
    ("point", "<i4"), ("seq", "<i8"), ("engine_ns", "<i8"), ("call_ns", "<i8"), ("message_ns", "<i8"),
    ("queue_ns", "<i8"), ("xmit_ns", "<i8"), ("skbaddr", "<u8"), ("sk", "<u8"),
])
RECEIVED_PATH_DTYPE = np.dtype([
    ("point", "<i4"), ("seq", "<i8"), ("receive_ns", "<i8"), ("wake_ns", "<i8"), ("return_ns", "<i8"),
    ("engine_ns", "<i8"), ("cpu", "<i2"), ("skbaddr", "<u8"), ("sk", "<u8"),
])

# reasons a datagram of the engine's record is not paired (shown to users as they are)
NO_THREAD = "the engine's thread is not recorded in the file"
NO_SEND_CALL = "its sendmmsg call is not in the trace"
SEND_COUNT = "its sendmmsg call sent another number of datagrams"
NO_SOCKET_EVENTS = "the kernel has no sock_send_length / sock_recv_length events"
MESSAGE_COUNT = "its call's messages differ from the engine's batch"
NOT_ONE_BUFFER = "not one buffer of its length queued in its message"
NO_XMIT = "no device transmit of its buffer"
NO_RECEIVE_CALL = "its recvmmsg call is not in the trace"
FOREIGN_IN_CALL = "its recvmmsg call also returned datagrams the engine rejected"
EVENTS_LOST = "the kernel lost trace events"
QUEUE_MISMATCH = "its socket's queue does not line up with its wake-ups"
NOT_ONE_RECEIVE = "not one received buffer of its length before its socket's wake-up"
CONCURRENT = "queued on its socket while another CPU queued one (order unknown)"
LENGTH = "its length differs from the engine's record"
#: Kernel side: datagrams queued on the engine's socket that are in no engine record.
UNRECORDED = "queued on the engine's socket, not in its record (another test's, or never read)"


@dataclass
class Pairing:
    """The datagrams of the engine's record whose path was found (``paths``), and the rest by reason.

    ``unpaired``: engine datagrams without a path, by reason; ``unrecorded``: kernel datagrams on the
    engine's sockets that no engine record holds, by reason."""

    paths: np.ndarray
    datagrams: int = 0
    unpaired: Counter[str] = field(default_factory=Counter)
    unrecorded: Counter[str] = field(default_factory=Counter)

    @property
    def paired(self) -> int:
        return len(self.paths)

    def add(self, other: Pairing) -> None:
        """Take in another point's pairing."""
        self.paths = np.concatenate([self.paths, other.paths])
        self.datagrams += other.datagrams
        self.unpaired.update(other.unpaired)
        self.unrecorded.update(other.unrecorded)


# -- small joins ---------------------------------------------------------------------------------

def calls(trace: HostTrace, thread: int, number: int) -> np.ndarray:
    """One thread's complete calls of one system call: (enter_ns, exit_ns, ret), in time order.

    A thread makes one call at a time: a ``sys_enter`` whose next event of the thread is a ``sys_exit`` of
    the same number is a call (a call cut by the trace's start or end has only one of them: left out)."""
    ev = trace.events
    mine = ev[(ev["pid"] == thread) & np.isin(ev["event"], [trace.code("raw_syscalls:sys_enter"),
                                                            trace.code("raw_syscalls:sys_exit")])]
    is_enter = mine["event"] == trace.code("raw_syscalls:sys_enter")
    k = np.flatnonzero(is_enter[:-1] & ~is_enter[1:] & (mine["syscall"][:-1] == mine["syscall"][1:])
                       & (mine["syscall"][:-1] == number))
    out = np.zeros(len(k), dtype=[("enter_ns", "<i8"), ("exit_ns", "<i8"), ("ret", "<i8")])
    out["enter_ns"], out["exit_ns"], out["ret"] = mine["time_ns"][k], mine["time_ns"][k + 1], mine["ret"][k + 1]
    return out


def batches(engine_ns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(start index, length) of the runs of equal times in the engine's rows: one system call each."""
    if not len(engine_ns):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    start = np.flatnonzero(np.concatenate(([True], engine_ns[1:] != engine_ns[:-1])))
    return start, np.diff(np.concatenate((start, [len(engine_ns)])))


def next_of_buffer(addr: np.ndarray, t_ns: np.ndarray, then: np.ndarray, reused: np.ndarray,
                   backwards: bool = False) -> np.ndarray:
    """For each buffer (address, time): the index in ``then`` of its first event at or after the time (the last
    at or before it, ``backwards``), -1 when there is none before ``reused`` shows the address queued again in
    between (a freed buffer's address is reused)."""
    n_r, n_q = len(reused), len(addr)
    out = np.full(n_q, -1, np.int64)
    if not n_q or not len(then):
        return out
    sign = -1 if backwards else 1
    keys_addr = np.concatenate([reused["skbaddr"], addr, then["skbaddr"]])
    keys_t = sign * np.concatenate([reused["time_ns"], t_ns, then["time_ns"]])
    # at one instant: a reuse before the query (the query's own queueing is no later reuse), the query
    # before an event of it
    kind = np.concatenate([np.zeros(n_r, np.int8), np.ones(n_q, np.int8), np.full(len(then), 2, np.int8)])
    order = np.lexsort((kind, keys_t, keys_addr))
    kind_s, addr_s = kind[order], keys_addr[order]
    end = len(order)

    def next_at(mask: np.ndarray) -> np.ndarray:
        """For each sorted position, the first position at or after it where ``mask`` holds (``end``: none)."""
        return np.minimum.accumulate(np.where(mask, np.arange(end), end)[::-1])[::-1]

    nxt_then, nxt_reuse = next_at(kind_s == 2), next_at(kind_s == 0)
    at_q = np.empty(n_q, np.int64)
    at_q[order[kind_s == 1] - n_r] = np.flatnonzero(kind_s == 1)
    cand = nxt_then[at_q]
    ok = (cand < end) & (cand < nxt_reuse[at_q])
    ok &= addr_s[np.minimum(cand, end - 1)] == addr
    out[ok] = order[cand[ok]] - n_r - n_q
    return out


def _datagrams_of_calls(start: np.ndarray, length: np.ndarray, k: np.ndarray, found: np.ndarray, ret: np.ndarray,
                        result: Pairing, not_found: str, other_count: str
                        ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The engine's batches (``start``, ``length``) whose call ``k`` was ``found`` and handled as many datagrams
    as the batch (``ret``): (row, call, place in the call, datagrams in the call) of each of their datagrams;
    the others counted."""
    exact = found.copy()
    exact[found] &= ret[k[found]] == length[found]
    result.unpaired[not_found] += int(length[~found].sum())
    result.unpaired[other_count] += int(length[found & ~exact].sum())
    b = np.repeat(np.flatnonzero(exact), length[exact])
    j = np.arange(len(b)) - np.repeat(np.cumsum(length[exact]) - length[exact], length[exact])
    return start[b] + j, k[b], j, length[b]


def _worth_pairing(result: Pairing, thread: int) -> bool:
    """Whether there are datagrams and the engine's thread to pair them by (counted as unpaired when not)."""
    if thread < 0:
        result.unpaired[NO_THREAD] += result.datagrams
    return result.datagrams > 0 and thread >= 0


def _window_counts(times: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(count, first index) of sorted ``times`` in each half-open window (lo, hi]."""
    a = np.searchsorted(times, lo, side="right")
    b = np.searchsorted(times, hi, side="right")
    return b - a, a


# -- sending host ----------------------------------------------------------------------------------

def pair_sent(trace: HostTrace, sent: np.ndarray, size_bytes: int, thread: int) -> Pairing:
    """Pair one stream point's ``stream/sent`` rows (in sequence order) with the sending host's events."""
    rows = sent[sent["t_ns"] >= 0]
    result = Pairing(np.zeros(0, SENT_PATH_DTYPE), datagrams=len(rows))
    if not _worth_pairing(result, thread):
        return result
    start, length = batches(rows["t_ns"])
    t_batch = rows["t_ns"][start]
    t_next = np.concatenate((t_batch[1:], [np.iinfo(np.int64).max]))
    done = calls(trace, thread, SENDMMSG)
    done = done[done["ret"] >= 0]
    k = np.searchsorted(done["enter_ns"], t_batch, side="left")
    found = k < len(done)
    found[found] &= done["enter_ns"][k[found]] < t_next[found]
    row, call, j, in_call = _datagrams_of_calls(start, length, k, found, done["ret"], result, NO_SEND_CALL,
                                                SEND_COUNT)
    if "sock:sock_send_length" not in trace.event_names:
        result.unpaired[NO_SOCKET_EVENTS] += len(row)
        return result
    enter, exit_ = done["enter_ns"][call], done["exit_ns"][call]
    mine = trace.events[trace.events["pid"] == thread]
    messages = mine[(mine["event"] == trace.code("sock:sock_send_length")) & (mine["ret"] >= 0)]
    # the call's messages: as many as the batch, each of the datagram's length
    n_msg, first = _window_counts(messages["time_ns"], enter - 1, exit_)
    whole = n_msg == in_call
    m = np.where(whole, first + j, 0)
    whole[whole] &= messages["ret"][m[whole]] == size_bytes
    result.unpaired[MESSAGE_COUNT] += int((~whole).sum())
    row, call, j, m, enter = row[whole], call[whole], j[whole], m[whole], enter[whole]
    msg_end = messages["time_ns"][m]
    msg_start = np.where(j == 0, enter - 1, messages["time_ns"][np.maximum(m - 1, 0)])
    queued = mine[mine["event"] == trace.code("net:net_dev_queue")]
    least = size_bytes + UDP_IP_BYTES
    queued = queued[(queued["len"] >= least) & (queued["len"] <= least + LINK_HEADER_MAX_BYTES)]
    n_q, q = _window_counts(queued["time_ns"], msg_start, msg_end)
    one = n_q == 1
    result.unpaired[NOT_ONE_BUFFER] += int((~one).sum())
    row, enter, m, q, msg_start = row[one], enter[one], m[one], q[one], np.maximum(msg_start[one], enter[one])
    buffers = queued[q]
    xmit = trace.of("net:net_dev_xmit")
    x = next_of_buffer(buffers["skbaddr"], buffers["time_ns"], xmit, trace.of("net:net_dev_queue"))
    seen = x >= 0
    result.unpaired[NO_XMIT] += int((~seen).sum())
    paths = np.zeros(int(seen.sum()), SENT_PATH_DTYPE)
    paths["point"], paths["seq"] = rows["point"][row[seen]], rows["seq"][row[seen]]
    paths["engine_ns"], paths["call_ns"], paths["message_ns"] = rows["t_ns"][row[seen]], enter[seen], msg_start[seen]
    paths["queue_ns"], paths["xmit_ns"] = buffers["time_ns"][seen], xmit["time_ns"][x[seen]]
    paths["skbaddr"], paths["sk"] = buffers["skbaddr"][seen], messages["sk"][m[seen]]
    result.paths = paths
    return result


# -- receiving host --------------------------------------------------------------------------------

@dataclass(frozen=True)
class SocketQueue:
    """One socket's datagrams in queue order as the kernel shows them (indices into the trace's events, and
    their times: events of two CPUs stamped in the same nanosecond have no order, so what orders datagrams
    across CPUs is compared in time, a tie counting as either order).

    Per wake-up (``sk_data_ready``): ``wake``; ``receive``, the ``netif_receive_skb`` of the buffer queued
    before it (-1: not one buffer); ``certain``, its place in the queue is known (no other datagram's span
    from receive to wake-up meets its own). ``returned``: the messages the recorded threads took from the
    socket (``sock_recv_length``, length > 0); ``empty``: the reads that found the queue empty
    (``sock_recv_length`` -EAGAIN). Every index array is ascending: the trace's events are in time order."""

    wake: np.ndarray
    receive: np.ndarray
    certain: np.ndarray
    returned: np.ndarray
    wake_ns: np.ndarray
    start_ns: np.ndarray
    returned_ns: np.ndarray
    empty: np.ndarray
    empty_ns: np.ndarray

    def wake_of_returned(self) -> np.ndarray:
        """For each returned datagram, the index into ``wake`` of its queueing; -1 where that is not known.

        A read that found the queue empty had taken every datagram queued before it, so the reads finding it
        empty cut the socket's life into stretches that line up (or not) on their own: in each, the k-th
        datagram returned is the k-th queued. A datagram received before such a read and woken after it was
        queued on one side of it: as many returned before the read as were surely queued before it puts all
        such datagrams after it, as many as those and these together puts them before; any other count
        leaves them unplaced, and the stretches on both sides are refused. A stretch is also refused when it
        returned a different number than was queued (a datagram queued before the span looked at, a lost
        wake-up) or one before it was queued; the last stretch may leave datagrams unread. The first
        stretch takes the socket to start empty."""
        e_ns = self.empty_ns  # in trace order, which is time order
        stretches = len(e_ns) + 1
        after = np.searchsorted(e_ns, self.start_ns, side="left")  # empty reads surely before its queueing
        before = np.searchsorted(e_ns, self.wake_ns, side="right")  # the first surely after it
        # at each empty read j: returned before it, surely queued before it, and queued on either side
        at = np.arange(len(e_ns))
        taken_by = np.searchsorted(self.returned, self.empty)
        surely = np.searchsorted(np.sort(before), at, side="right")
        either = np.searchsorted(np.sort(after), at, side="right") - surely
        one = np.flatnonzero(before == after + 1)  # on either side of one empty read, j
        j = after[one]
        later, earlier = np.zeros(len(after), bool), np.zeros(len(after), bool)
        later[one] = taken_by[j] == surely[j]
        earlier[one] = ~later[one] & (taken_by[j] == surely[j] + either[j])
        stretch = np.where(later, after + 1, after)
        known = (after == before) | later | earlier
        straddled = np.zeros(stretches + 1, np.int64)
        np.add.at(straddled, after[~known], 1)
        np.add.at(straddled, before[~known] + 1, -1)
        wakes = np.flatnonzero(known)
        wakes = wakes[np.argsort(stretch[wakes], kind="stable")]
        of_wake = stretch[wakes]
        of_return = np.searchsorted(self.empty, self.returned)
        queued = np.bincount(of_wake, minlength=stretches)
        taken = np.bincount(of_return, minlength=stretches)
        miscounted = taken != queued
        miscounted[-1] = taken[-1] > queued[-1]
        refused = (np.cumsum(straddled)[:stretches] > 0) | miscounted
        rank = np.arange(len(of_return)) - (np.cumsum(taken) - taken)[of_return]
        first_wake = np.cumsum(queued) - queued
        place = np.full(len(of_return), -1, np.int64)
        ok = ~refused[of_return]
        place[ok] = wakes[first_wake[of_return[ok]] + rank[ok]]
        early = np.zeros(len(of_return), bool)
        early[ok] = self.wake_ns[place[ok]] > self.returned_ns[ok]
        refused[of_return[early]] = True
        place[refused[of_return]] = -1
        return place


def socket_queue(trace: HostTrace, sk: int, first: int, last: int) -> SocketQueue:
    """The wake-ups of socket ``sk`` among the trace's events ``first..last`` (indices: the span the socket
    lived in) with the buffers queued before them, and the messages returned from it."""
    ev = trace.events
    span = np.zeros(len(ev), bool)
    span[first:last + 1] = True
    is_wake = ev["event"] == trace.code("sock:sk_data_ready")
    is_rx = ev["event"] == trace.code("net:netif_receive_skb")
    wakes = np.flatnonzero(is_wake & (ev["sk"] == sk) & span)
    receive = np.full(len(wakes), -1, np.int64)
    for cpu in np.unique(ev["cpu"][wakes]):
        # one CPU's events keep their order in the trace, ties included
        on = ev["cpu"] == cpu
        all_w = np.flatnonzero(is_wake & on)  # every socket's wake-ups on this CPU
        rx = np.flatnonzero(is_rx & on)
        here = np.flatnonzero(ev["cpu"][wakes] == cpu)
        w = wakes[here]
        prev_w = np.searchsorted(all_w, w) - 1  # the CPU's previous wake-up, of any socket
        lo = np.where(prev_w >= 0, all_w[np.maximum(prev_w, 0)], -1)
        at = np.searchsorted(rx, w) - 1
        cand = rx[np.maximum(at, 0)] if len(rx) else np.zeros(len(w), np.int64)
        have = (at >= 0) & (cand > lo)
        # ... and the only buffer of its length handed up since that previous wake-up
        for length in np.unique(ev["len"][cand[have]]):
            of_len = rx[ev["len"][rx] == length]
            n = np.searchsorted(of_len, w) - np.searchsorted(of_len, lo, side="right")
            have &= ~((ev["len"][cand] == length) & (n != 1))
        receive[here[have]] = cand[have]
    wake_ns = ev["time_ns"][wakes]
    start_ns = ev["time_ns"][np.where(receive >= 0, receive, wakes)]
    # queued somewhere between its receive and its wake-up: its place is certain where no other span meets it
    later_start = np.minimum.accumulate(np.concatenate((start_ns[1:], [np.iinfo(np.int64).max]))[::-1])[::-1]
    earlier_end = np.concatenate(([np.iinfo(np.int64).min], np.maximum.accumulate(wake_ns)[:-1]))
    certain = (later_start > wake_ns) & (earlier_end < start_ns)
    reads = (ev["event"] == trace.code("sock:sock_recv_length")) & (ev["sk"] == sk) & span
    returned = np.flatnonzero(reads & (ev["ret"] > 0))
    empty = np.flatnonzero(reads & (ev["ret"] == -EAGAIN))
    return SocketQueue(wake=wakes, receive=receive, certain=certain, returned=returned, wake_ns=wake_ns,
                       start_ns=start_ns, returned_ns=ev["time_ns"][returned], empty=empty,
                       empty_ns=ev["time_ns"][empty])


def socket_life(trace: HostTrace, sk: int, thread: int) -> tuple[int, int]:
    """The events (first, last index) a socket read by ``thread`` can have lived in: after the last event of the
    thread that read a socket at the same address before (it closed that one: an address is reused only once
    freed) and up to the reading thread's last event (it closes the socket when done)."""
    ev = trace.events
    reads = np.flatnonzero((ev["event"] == trace.code("sock:sock_recv_length")) & (ev["sk"] == sk))
    mine = np.flatnonzero(ev["pid"] == thread)
    own = reads[ev["pid"][reads] == thread]
    before = reads[(ev["pid"][reads] != thread) & (reads < own[0])] if len(own) else reads[:0]
    first = 0
    if len(before):
        previous = np.flatnonzero(ev["pid"] == ev["pid"][before[-1]])
        first = int(min(previous[-1], own[0])) + 1
    return first, int(mine[-1]) if len(mine) else len(ev) - 1


def pair_received(trace: HostTrace, received: np.ndarray, thread: int) -> Pairing:
    """Pair one stream point's ``stream/received`` rows (arrival order) with the receiving host's events."""
    result = Pairing(np.zeros(0, RECEIVED_PATH_DTYPE), datagrams=len(received))
    if not _worth_pairing(result, thread):
        return result
    if "sock:sock_recv_length" not in trace.event_names or "sock:sk_data_ready" not in trace.event_names:
        result.unpaired[NO_SOCKET_EVENTS] += len(received)
        return result
    if trace.lost or trace.unreadable_subbuffers:
        result.unpaired[EVENTS_LOST] += len(received)
        return result
    start, length = batches(received["user_ns"])
    u = received["user_ns"][start]
    u_prev = np.concatenate(([np.iinfo(np.int64).min], u[:-1]))
    done = calls(trace, thread, RECVMMSG)
    k = np.searchsorted(done["exit_ns"], u, side="right") - 1
    found = k >= 0
    found[found] &= (done["exit_ns"][k[found]] > u_prev[found]) & (done["ret"][k[found]] > 0)
    row, call, j, in_call = _datagrams_of_calls(start, length, k, found, done["ret"], result, NO_RECEIVE_CALL,
                                                FOREIGN_IN_CALL)
    ev = trace.events
    messages = np.flatnonzero((ev["pid"] == thread) & (ev["event"] == trace.code("sock:sock_recv_length"))
                              & (ev["ret"] > 0))
    n_msg, first = _window_counts(ev["time_ns"][messages], done["enter_ns"][call] - 1, done["exit_ns"][call])
    whole = n_msg == in_call
    result.unpaired[MESSAGE_COUNT] += int((~whole).sum())
    row, call, m = row[whole], call[whole], messages[(first + j)[whole]]
    parts = [np.zeros(0, RECEIVED_PATH_DTYPE)]
    for sk in np.unique(ev["sk"][m]):
        on = ev["sk"][m] == sk
        r, c, mm = row[on], call[on], m[on]
        queue = socket_queue(trace, int(sk), *socket_life(trace, int(sk), thread))
        result.unrecorded[UNRECORDED] += max(len(queue.wake) - len(r), 0)
        place = queue.wake_of_returned()[np.searchsorted(queue.returned, mm)]
        lined_up = place >= 0
        result.unpaired[QUEUE_MISMATCH] += int((~lined_up).sum())
        r, c, mm, place = r[lined_up], c[lined_up], mm[lined_up], place[lined_up]
        size = received["size_bytes"][r].astype(np.int64)
        length_ok = ev["ret"][mm] == size
        certain = queue.certain[place]
        buf = queue.receive[place]
        one = (buf >= 0) & (ev["len"][np.maximum(buf, 0)] == size + UDP_IP_BYTES)
        result.unpaired[LENGTH] += int((~length_ok).sum())
        result.unpaired[CONCURRENT] += int((length_ok & ~certain).sum())
        result.unpaired[NOT_ONE_RECEIVE] += int((length_ok & certain & ~one).sum())
        ok = length_ok & certain & one
        p = np.zeros(int(ok.sum()), RECEIVED_PATH_DTYPE)
        rx = ev[buf[ok]]
        p["point"], p["seq"] = received["point"][r[ok]], received["seq"][r[ok]]
        p["receive_ns"], p["wake_ns"] = rx["time_ns"], ev["time_ns"][queue.wake[place[ok]]]
        p["return_ns"], p["engine_ns"] = done["exit_ns"][c[ok]], received["user_ns"][r[ok]]
        p["cpu"], p["skbaddr"], p["sk"] = rx["cpu"], rx["skbaddr"], sk
        parts.append(p)
    paths = np.concatenate(parts)
    result.paths = paths[np.argsort(paths["return_ns"], kind="stable")]
    return result


# -- a stream run ----------------------------------------------------------------------------------

@dataclass
class StreamPaths:
    """A stream run's datagrams paired on the sending and the receiving host (None: that host not traced).

    ``same_buffer_ns``: where both hosts are one kernel (loopback, network namespaces), for each datagram
    paired on both with the same buffer, ns from its device transmit to its ``netif_receive_skb``."""

    sender: str | None
    receiver: str | None
    sent: Pairing | None
    received: Pairing | None
    same_buffer_ns: np.ndarray


def same_kernel(a: HostTrace, b: HostTrace, run: int = 16) -> bool:
    """Both traces recorded one kernel (loopback, network namespaces): ``run`` buffers queued to devices one
    after another at the same addresses in both (each tracing instance stamps an event itself, so times
    differ by some hundred ns; addresses of two kernels never run alike)."""
    qa, qb = a.of("net:net_dev_queue"), b.of("net:net_dev_queue")
    qa = qa[(qa["time_ns"] >= max(a.start_ns, b.start_ns)) & (qa["time_ns"] <= min(a.end_ns, b.end_ns))]
    if len(qa) < run or len(qb) < run:
        return False
    want = qa["skbaddr"][:run]
    starts = np.flatnonzero(qb["skbaddr"][:len(qb) - run + 1] == want[0])
    return any((qb["skbaddr"][k:k + run] == want).all() for k in starts)


def stream_paths(traces: list[HostTrace], points: np.ndarray, sent: np.ndarray, received: np.ndarray
                 ) -> StreamPaths:
    """Pair every point of a stream run: ``stream/sent`` on the near host's trace (``local``), ``stream/received``
    on the far host's (the other trace). Files without the engine's thread columns pair nothing (said so)."""
    by_host = {t.host: t for t in traces}
    near = by_host.get("local")
    far = next((t for t in traces if t.host != "local"), None)
    threads = set(points.dtype.names or ()) >= {"send_thread", "recv_thread"}
    out_s = Pairing(np.zeros(0, SENT_PATH_DTYPE)) if near else None
    out_r = Pairing(np.zeros(0, RECEIVED_PATH_DTYPE)) if far else None
    for p in points:
        size = int(p["size_bytes"])
        if out_s is not None and near is not None:
            out_s.add(pair_sent(near, sent[sent["point"] == p["point"]], size,
                                int(p["send_thread"]) if threads else -1))
        if out_r is not None and far is not None:
            out_r.add(pair_received(far, received[received["point"] == p["point"]],
                                    int(p["recv_thread"]) if threads else -1))
    same = np.zeros(0, np.int64)
    if out_s is not None and out_r is not None and near is not None and far is not None and same_kernel(near, far):
        same = same_buffer_delays(out_s.paths, out_r.paths, far)
    return StreamPaths(near.host if near else None, far.host if far else None, out_s, out_r, same)


def same_buffer_delays(sent: np.ndarray, received: np.ndarray, trace: HostTrace) -> np.ndarray:
    """ns from device transmit to ``netif_receive_skb`` of each datagram that both sides of one kernel paired
    with the same buffer, both events from ``trace`` (one tracing instance: one time stamp per event): its
    last transmit before the receive, the address not queued again in between."""
    s = sent[np.lexsort((sent["seq"], sent["point"]))]
    key_s = s["point"].astype(np.int64) << 40 | s["seq"]
    key_r = received["point"].astype(np.int64) << 40 | received["seq"]
    k = np.minimum(np.searchsorted(key_s, key_r), max(len(s) - 1, 0))
    both = (k < len(s)) & (key_s[k] == key_r) if len(s) else np.zeros(len(received), bool)
    r = received[both & (s["skbaddr"][k] == received["skbaddr"])] if len(s) else received[:0]
    xmit = trace.of("net:net_dev_xmit")
    x = next_of_buffer(r["skbaddr"], r["receive_ns"], xmit, trace.of("net:net_dev_queue"), backwards=True)
    return r["receive_ns"][x >= 0] - xmit["time_ns"][x[x >= 0]]
