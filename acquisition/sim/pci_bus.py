"""Per-clock PCI bus signals from a list of transactions, per the PCI Local Bus Specification 3.0.

The rig's discrete-event model decides *when* each transaction starts; this module decides
what the wires show, clock by clock, so that independent decoders read the same story.

Clocks and levels
-----------------
A *clock* ``c`` is a rising CLK edge; the value of a signal "at clock c" is the value every agent
samples at that edge (what a logic analyzer in state mode records). Values are electrical
(1 = high). Every ``#`` signal is active low and idles high through its pull-up (spec 4.3.3);
sustained tri-state signals are driven high for one clock before release (spec 2.1), which
leaves them high, so a released signal simply reads 1.

Transaction timeline (spec 3.3)
-------------------------------
``s`` = ``start_clk``: the first clock FRAME# is sampled asserted (the address phase). With a
dual address cycle (``address >= 2**32``, spec 3.9) the address phases are ``s`` (C/BE# = DAC,
low dword) and ``s + 1`` (the command, high dword); ``a`` is the last address phase and data
phase 0 begins at ``b0 = a + 1``. DEVSEL# is asserted at ``dv = a + devsel`` (1 fast, 2 medium,
3 slow, 4 subtractive; spec 3.6.1, 3.9: DAC decode is timed from the second address phase).
``e0 = max(dv, b0 + read)`` is the first clock the target may assert TRDY# or STOP#: never
before DEVSEL#, and on reads not on the AD turnaround clock ``b0`` (spec 3.3.1).

Data phase ``k`` begins at ``b_k`` (``b0``, then the clock after phase ``k-1`` completes).
IRDY# is asserted from ``i_k = b_k + master_waits[k]`` and TRDY# from ``t_k = (e0 if k == 0
else b_k) + target_waits[k]``; both stay asserted until the phase completes at
``P_k = max(i_k, t_k)`` (spec 3.3.1: once asserted, neither may change until completion).
The master deasserts FRAME# on the clock it asserts IRDY# for its final data phase (it may
not deassert FRAME# without IRDY#, spec 3.3.3.1).

Terminations (spec 3.3.3; n = len(data), F = clock FRAME# is first deasserted, L = last busy clock)
------------------------------------------------------------------------------------------------
- ``normal``: every phase completes with IRDY# and TRDY#; ``F = i_{n-1}``, ``L = P_{n-1}``.
- ``retry``: STOP# without TRDY# from ``t_0``; nothing transfers. ``data`` is the master's
  intended burst (only ``data[0]`` reaches the bus). A single-phase master already deasserted
  FRAME# with IRDY#: ``L = max(t_0, i_0)``. A burst master still holds FRAME# and, having
  sampled STOP#, deasserts it as soon as IRDY# can be asserted (spec 3.3.3.2.1, rule 5):
  ``F = L = max(t_0 + 1, i_0)``.
- ``disconnect_with_data``: all ``n`` phases transfer; the target asserts STOP# together with
  TRDY# on the last one (spec 3.3.3.2.2). The master wanted more, so FRAME# is still asserted
  unless IRDY# came after STOP#: ``F = L = max(t_{n-1} + 1, i_{n-1})``; when ``L > P_{n-1}``
  the clock ``L`` is a final phase completed by IRDY# + STOP# without TRDY#.
- ``disconnect_without_data``: all ``n`` phases transfer with FRAME# held; at ``P_{n-1} + 1``
  the target asserts STOP# without TRDY# (IRDY# asserted: that phase ends with no data), the
  master deasserts FRAME# at ``P_{n-1} + 2``, the final phase completes there: ``L = P_{n-1} + 2``.
- ``target_abort``: the ``n`` given phases (``n`` may be 0) transfer with FRAME# held; at
  ``x = P_{n-1} + 1`` (``dv + 1`` when ``n == 0``, so DEVSEL# was seen first) the target
  deasserts DEVSEL# and asserts STOP# together; the master deasserts FRAME# at ``x + 1``:
  ``L = x + 1``.
- ``master_abort`` (``devsel == 0``): no DEVSEL# in ``a+1 .. a+4``. A single-phase master
  (FRAME# already deasserted) keeps IRDY# through ``a + 4``: ``L = max(a + 4, i_0)``; a burst
  master deasserts FRAME# at ``a + 5`` and IRDY# one clock later: ``L = max(a + 5, i_0)``.
  Special Cycle and reserved commands are never claimed (spec 3.1.1), so they need this.

At ``L + 1`` IRDY#, TRDY#, STOP#, DEVSEL# and ACK64# are deasserted (rule 6): the bus is idle
and the next transaction's address phase may come at ``L + 1 + TURNAROUND_CLOCKS``.
Spec latency limits are enforced (spec 3.5.1/3.5.2): TRDY# or STOP# of phase 0 within 16 clocks
of FRAME#, IRDY# of phase 0 within 8, and later phases within 8 clocks of the previous completion
(``target_waits[k], master_waits[k] <= 7`` for ``k >= 1``).

AD, C/BE#, PAR (spec 3.2.2, 3.8, 3.9)
-------------------------------------
Memory commands drive AD[1:0] = 00 (linear burst order); other commands drive the address as
given. The master drives write data and byte enables from the first clock of each data phase;
on reads the target drives AD from ``e0`` (after the turnaround) and from ``b_k`` later on.
64-bit transfers (REQ64# with FRAME#, ACK64# with DEVSEL#) must start QWORD aligned; with DAC
and REQ64# the master also drives the high address on AD[63:32] and the command on C/BE[7:4]#.
Phases past the given data (stop phases) repeat the last values; with no data at all (a
target abort on the first phase) the master shows no byte lane enabled and zero write data.
Lines nobody drives (turnarounds, idle bus, the upper half in 32-bit transactions) keep
their last driven value: the bus-parked agent or the bus keeper holds them (spec 3.4.3), and
it keeps parity consistent. PAR (PAR64) is even parity over AD[31:0] and C/BE[3:0]# (AD[63:32]
and C/BE[7:4]#) of the previous clock (spec 3.7.1), so it is valid one clock after every
address and data phase. For a data phase listed in ``parity_error_phases`` PAR (and PAR64 on
a 64-bit transfer) is inverted on the clocks after that phase's data is driven, and the receiver
of the data (target on writes, master on reads) asserts PERR# for one clock at ``P_k + 2``
(spec 3.7.4.1).

Arbitration (spec 3.4.1)
------------------------
The probed device ("nic" master) asserts REQ# from ``s - 3``; the arbiter answers with GNT#
from ``s - 2`` and removes it after the address phase (asserted through ``s``), so GNT# is
sampled asserted on the idle clock ``s - 1``. REQ# is deasserted with FRAME# unless the next
request follows at once. After a Retry or Disconnect REQ# stays deasserted on the idle clock
and the clock before it; when that leaves less than the usual lead, REQ# is shorter or absent
and the arbiter's GNT# comes all the same (it may park the bus on the device). Host-bridge transactions use the bridge's own REQ#/GNT#, which are not probed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import chain, repeat
from operator import attrgetter, eq, is_not, ne
from typing import Any

import numpy as np
from nicrig.acquisition.capture import unitsize_for
from nicrig.acquisition.sim import _pci_render

#: Idle clocks between one transaction's last busy clock and the next address phase.
TURNAROUND_CLOCKS = 1
#: REQ# / GNT# of a "nic" transaction are asserted this many clocks before its address phase.
REQ_LEAD_CLOCKS = 3
GNT_LEAD_CLOCKS = 2
#: Spec 3.5.1 / 3.5.2 latency limits, in clocks.
TARGET_INITIAL_LATENCY = 16
SUBSEQUENT_LATENCY = 8
MASTER_INITIAL_LATENCY = 8
#: DEVSEL# may come 1 (fast) .. 4 (subtractive) clocks after the last address phase (spec 3.6.1).
DEVSEL_WINDOW = 4
#: PERR# is asserted this many clocks after the data phase with bad parity (spec 3.7.4.1).
PERR_DELAY = 2

COMMAND_NAMES = (
    "Interrupt Acknowledge",
    "Special Cycle",
    "I/O Read",
    "I/O Write",
    "Reserved",
    "Reserved",
    "Memory Read",
    "Memory Write",
    "Reserved",
    "Reserved",
    "Configuration Read",
    "Configuration Write",
    "Memory Read Multiple",
    "Dual Address Cycle",
    "Memory Read Line",
    "Memory Write and Invalidate",
)
DAC_COMMAND = 0xD
READ_COMMANDS = frozenset({0x0, 0x2, 0x6, 0xA, 0xC, 0xE})
MEMORY_COMMANDS = frozenset({0x6, 0x7, 0xC, 0xE, 0xF})
#: No target may claim these (Special Cycle is broadcast, reserved codes are unclaimed): master abort.
UNCLAIMED_COMMANDS = frozenset({0x1, 0x4, 0x5, 0x8, 0x9})
MWI_COMMAND = 0xF

TERMINATIONS = (
    "normal",
    "retry",
    "disconnect_with_data",
    "disconnect_without_data",
    "target_abort",
    "master_abort",
)
_NORMAL, _RETRY, _DWD, _DWOD, _TABORT, _MABORT = range(len(TERMINATIONS))
_TERM_CODE = {name: i for i, name in enumerate(TERMINATIONS)}

_CONTROL = ("FRAME#", "IRDY#", "TRDY#", "DEVSEL#", "STOP#", "REQ#", "GNT#", "INTA#", "PERR#")
_CONTROL64 = ("REQ64#", "ACK64#")

#: Protocol role -> channel (or vector) name, as capture sets record them.
ROLES = {
    "clk": "CLK",
    "frame": "FRAME#",
    "irdy": "IRDY#",
    "trdy": "TRDY#",
    "devsel": "DEVSEL#",
    "stop": "STOP#",
    "req": "REQ#",
    "gnt": "GNT#",
    "inta": "INTA#",
    "perr": "PERR#",
    "req64": "REQ64#",
    "ack64": "ACK64#",
    "par": "PAR",
    "par64": "PAR64",
    "ad": "AD",
    "cbe": "C/BE#",
}

TRUTH_DTYPE = np.dtype(
    [
        ("ss", np.int64),
        ("es", np.int64),
        ("command", np.uint8),
        ("command_name", "S32"),
        ("address", np.uint64),
        ("dac", np.bool_),
        ("data_phases", np.int32),
        ("bytes", np.int64),
        ("termination", "S24"),
        ("kind", "S16"),
        ("master", "S8"),
        ("target_wait_clocks", np.int32),
        ("master_wait_clocks", np.int32),
        ("devsel", np.int8),
        ("wide", np.bool_),
        ("parity_error", np.bool_),
        ("stop_asserted", np.bool_),
    ]
)


@dataclass(slots=True)
class PciTransaction:
    """One PCI transaction as the rig model schedules it (see the module doc for the clocks)."""

    start_clk: int
    command: int
    address: int
    data: np.ndarray
    byte_enables: np.ndarray
    target_waits: np.ndarray | None = None
    master_waits: np.ndarray | None = None
    devsel: int = 1
    termination: str = "normal"
    wide: bool = False
    master: str = "host"
    parity_error_phases: tuple[int, ...] = ()
    kind: str = ""


def _check_width(width_bits: int) -> None:
    if width_bits not in (32, 64):
        raise ValueError(f"PCI bus width must be 32 or 64 bits, not {width_bits}")


def channels_for(width_bits: int, with_ad: bool, timing: bool) -> list[str]:
    """Channel names in capture order: CLK (timing mode only), control, AD, C/BE#, parity."""
    _check_width(width_bits)
    channels = (["CLK"] if timing else []) + list(_CONTROL)
    if width_bits == 64:
        channels += _CONTROL64
    if with_ad:
        channels += [f"AD[{i}]" for i in range(width_bits)]
        channels += [f"C/BE#[{i}]" for i in range(width_bits // 8)]
        channels += ["PAR", "PAR64"] if width_bits == 64 else ["PAR"]
    return channels


def roles_for(width_bits: int, with_ad: bool, timing: bool) -> dict[str, str]:
    """The subset of :data:`ROLES` whose channel or vector exists in that channel set."""
    present = set(channels_for(width_bits, with_ad, timing)) | ({"AD", "C/BE#"} if with_ad else set())
    return {role: name for role, name in ROLES.items() if name in present}


# -- the clock arithmetic shared by busy_clocks() and the renderer ------------------------------


def _pick(cond: Any, yes: Any, no: Any) -> Any:
    return yes if cond else no


def _end_clocks(
    term: Any,
    n: Any,
    a: Any,
    dv: Any,
    t0: Any,
    i0: Any,
    t_last: Any,
    i_last: Any,
    p_last: Any,
    mx: Callable[[Any, Any], Any],
    pick: Callable[[Any, Any, Any], Any],
) -> tuple[Any, Any, Any]:
    """FRAME# deassertion clock, last busy clock and STOP# assertion clock (module doc).

    Written once for Python ints (``mx=max, pick=_pick``) and NumPy arrays
    (``np.maximum, np.where``) so that :func:`busy_clocks` and the renderer cannot disagree.
    ``t0, i0`` are phase 0's TRDY#/IRDY# clocks, ``*_last`` those of the last given phase and
    its completion; all clocks are absolute. The STOP# clock is meaningless for normal and
    master-abort terminations.
    """
    one = n == 1
    abort_at = pick(n > 0, p_last + 1, dv + 1)
    frame_retry = pick(one, i0, mx(t0 + 1, i0))
    frame_mabort = pick(one, i0, mx(a + DEVSEL_WINDOW + 1, i0))
    frame_end = pick(
        term == _NORMAL,
        i_last,
        pick(
            term == _RETRY,
            frame_retry,
            pick(
                term == _DWD,
                mx(t_last + 1, i_last),
                pick(term == _DWOD, p_last + 2, pick(term == _TABORT, abort_at + 1, frame_mabort)),
            ),
        ),
    )
    last = pick(
        term == _NORMAL,
        p_last,
        pick(
            term == _RETRY,
            pick(one, mx(t0, i0), frame_retry),
            pick(term == _MABORT, pick(one, mx(a + DEVSEL_WINDOW, i0), frame_mabort), frame_end),
        ),
    )
    stop = pick(term == _RETRY, t0, pick(term == _DWD, t_last, pick(term == _DWOD, p_last + 1, abort_at)))
    return frame_end, last, stop


def _waits_of(waits: np.ndarray | None, n: int, what: str) -> np.ndarray:
    if waits is None:
        return np.zeros(n, np.int64)
    waits = np.asarray(waits, np.int64)
    if waits.shape != (n,):
        raise ValueError(f"{what} has {waits.size} entries for {n} data phases")
    return waits


def busy_clocks(t: PciTransaction, bus_width_bits: int) -> int:
    """Clocks from ``t.start_clk`` to the last clock FRAME# or IRDY# is asserted, inclusive.

    The next transaction may start at ``start_clk + busy_clocks + TURNAROUND_CLOCKS``. This
    checks only what the count depends on; :class:`PciRenderer` validates everything. The
    count depends on the transaction's shape alone, which a model repeats endlessly, so
    shapes are memoized.
    """
    def waits_key(w: np.ndarray | None) -> bytes | None:
        return None if w is None else np.asarray(w, np.int64).tobytes()

    return _busy_clocks_of_shape(bus_width_bits, t.termination, len(t.data), t.devsel,
                                 t.command in READ_COMMANDS, t.address >= 1 << 32,
                                 waits_key(t.target_waits), waits_key(t.master_waits))


@lru_cache(maxsize=4096)
def _busy_clocks_of_shape(bus_width_bits: int, termination: str, n: int, devsel: int, read: bool, dac: bool,
                          target_waits: bytes | None, master_waits: bytes | None) -> int:
    _check_width(bus_width_bits)
    term = _TERM_CODE.get(termination)
    if term is None:
        raise ValueError(f"unknown termination {termination!r}; use one of {TERMINATIONS}")
    if n == 0 and term != _TABORT:
        raise ValueError("a transaction needs at least one data phase (only target_abort may have none)")
    if (devsel == 0) != (term == _MABORT) or not 0 <= devsel <= DEVSEL_WINDOW:
        raise ValueError(f"devsel={devsel} does not fit termination {termination!r}")
    tw = _waits_of(None if target_waits is None else np.frombuffer(target_waits, np.int64), n, "target_waits")
    mw = _waits_of(None if master_waits is None else np.frombuffer(master_waits, np.int64), n, "master_waits")
    a = int(dac)
    dv = a + devsel
    e0 = max(dv, a + 1 + int(read))
    t0 = e0 + (int(tw[0]) if n else 0)
    i0 = a + 1 + (int(mw[0]) if n else 0)
    p_last, t_last, i_last = max(t0, i0), t0, i0
    if n > 1:
        longer = np.maximum(tw[1:], mw[1:])
        p_last += n - 1 + int(longer.sum())
        begin_last = p_last - int(longer[-1])
        t_last, i_last = begin_last + int(tw[-1]), begin_last + int(mw[-1])
    _, last, _ = _end_clocks(term, n, a, dv, t0, i0, t_last, i_last, p_last, max, _pick)
    return int(last) + 1


# -- batch extraction and validation ------------------------------------------------------------


def _ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Concatenation of ``arange(s, s + l)`` for each pair, without a Python loop."""
    total = int(lengths.sum())
    shift = np.repeat(starts - (np.cumsum(lengths) - lengths), lengths)
    return shift + np.arange(total, dtype=np.int64)


def _fail(mask: np.ndarray, starts: np.ndarray, message: str) -> None:
    """Raise ValueError naming the first transaction (by start clock) where ``mask`` holds."""
    if mask.any():
        bad = int(np.flatnonzero(mask)[0])
        raise ValueError(f"transaction at clock {int(starts[bad])}: {message}")


@dataclass(slots=True)
class _Batch:
    """All transactions as flat arrays, sorted by start clock; per-phase arrays use ``off``/``n``
    (transaction ``i``'s phases are ``off[i] .. off[i] + n[i] - 1``)."""

    s: np.ndarray
    cmd: np.ndarray
    addr: np.ndarray
    dac: np.ndarray
    rd: np.ndarray
    devsel: np.ndarray
    term: np.ndarray
    n: np.ndarray
    wide: np.ndarray
    nic: np.ndarray
    kind: np.ndarray
    off: np.ndarray
    be_bits: np.ndarray
    tw_sum: np.ndarray
    mw_sum: np.ndarray
    data: np.ndarray
    be: np.ndarray
    tw: np.ndarray
    mw: np.ndarray
    perr_phase: np.ndarray


def _completed_phases(term: np.ndarray, n: np.ndarray) -> np.ndarray:
    """Data phases that transfer: none under Retry or Master-Abort, all given ones otherwise."""
    return np.where((term == _RETRY) | (term == _MABORT), 0, n)


def _per_txn(owners: np.ndarray, count: int) -> np.ndarray:
    """Boolean per transaction: True for every transaction index listed in ``owners``."""
    return np.bincount(owners, minlength=count) > 0


def _phase_sums(values: np.ndarray, off: np.ndarray, n: np.ndarray) -> np.ndarray:
    """Per transaction, the sum of per-phase ``values`` over its phases (int64)."""
    run = np.zeros(values.size + 1, np.int64)
    np.cumsum(values, dtype=np.int64, out=run[1:])
    return run[off + n] - run[off]


def _owners(off: np.ndarray, phases: np.ndarray) -> np.ndarray:
    """Transaction index of each of ``phases`` (flat phase indices); ``off`` as in :class:`_Batch`.

    Transactions without phases share their ``off`` with the next one: the last of equal offsets owns."""
    return np.searchsorted(off, phases, "right") - 1


def _exact_integers(arrays: list[Any], what: str) -> np.ndarray:
    """``arrays`` joined as Python ints, where NumPy's join was not an integer array: signed and unsigned
    64-bit arrays together promote to float64, which would round data words above 2**53 (and a float or
    object array is no bus value at all)."""
    arrays = [np.asarray(a) for a in arrays]
    if any(a.size and a.dtype.kind not in "iub" for a in arrays):
        raise ValueError(f"{what} must be arrays of integers")
    return np.concatenate([a.astype(object) for a in arrays])


def _phase_field(values: list[Any], n: np.ndarray, off: np.ndarray, s: np.ndarray, dtype: Any, what: str) -> np.ndarray:
    """Concatenate per-transaction phase arrays (``None`` entries mean zeros), checking lengths."""
    count = len(values)
    given = np.flatnonzero(np.fromiter(map(is_not, values, repeat(None)), np.bool_, count))
    if given.size == 0:
        return np.zeros(int(n.sum()), dtype)
    arrays = [values[i] for i in given] if given.size < count else values
    try:
        lengths = np.fromiter(map(len, arrays), np.int64, given.size)
        flat = np.concatenate(arrays)
    except (TypeError, ValueError):
        raise ValueError(f"{what} must be one-dimensional arrays") from None
    if flat.dtype.kind not in "iu":
        flat = _exact_integers(arrays, what)
    _fail(_per_txn(given[lengths != n[given]], count), s, f"{what} length differs from len(data)")
    negative = flat < 0
    if negative.any():
        _fail(_per_txn(np.repeat(given, lengths)[negative], count), s, f"{what} must not be negative")
    if given.size == count:  # the usual case: every transaction gave its array, already in phase order
        return flat.astype(dtype, copy=False)  # flat is new: returned as it is when of the dtype already
    out = np.zeros(int(n.sum()), dtype)
    out[_ranges(off[given], lengths)] = flat
    return out


def _scalar_fields(txs: list[PciTransaction]) -> tuple[np.ndarray, ...]:
    """The general path's per-transaction fields: start, command, address, devsel, termination code
    (-1: unknown), wide, nic, master neither host nor nic, and the data arrays with their lengths."""
    count = len(txs)
    # map() with attrgetter walks the objects in C: a generator expression costs a Python frame a field.
    def field(name: str) -> Iterator[Any]:
        return map(attrgetter(name), txs)

    s = np.fromiter(field("start_clk"), np.int64, count)
    cmd = np.fromiter(field("command"), np.int64, count)
    try:
        addr = np.fromiter(field("address"), np.uint64, count)
    except OverflowError:
        raise ValueError("addresses must lie in 0 .. 2**64 - 1") from None
    devsel = np.fromiter(field("devsel"), np.int64, count)
    term = np.fromiter(map(_TERM_CODE.get, field("termination"), repeat(-1)), np.int64, count)
    wide = np.fromiter(field("wide"), np.bool_, count)
    master = list(field("master"))
    nic = np.fromiter(map(eq, master, repeat("nic")), np.bool_, count)
    stranger = ~nic & np.fromiter(map(ne, master, repeat("host")), np.bool_, count)
    data = list(field("data"))
    n = np.fromiter(map(len, data), np.int64, count)
    return s, cmd, addr, devsel, term, wide, nic, stranger, data, n


def _batch(transactions: Sequence[PciTransaction], width_bits: int) -> _Batch:
    txs = list(transactions)
    count = len(txs)
    # One walk in C over the usual input (most of the renderer's CPU when done field by field); None when
    # anything is unusual, and then the general path below reads the objects and reports what is wrong.
    gathered = _pci_render.gather(txs, TERMINATIONS, PciTransaction)
    # The usual input is in start order (as a bus puts them) and needs no sort (its key read from every
    # transaction: ~4 ms of a block's 44,000 on the saturated stream's sending bus); any other is sorted
    # (stably) and walked again.
    starts = None if gathered is None else np.frombuffer(gathered[0], np.int64, count)
    if starts is None or (starts[1:] < starts[:-1]).any():
        txs.sort(key=attrgetter("start_clk"))
        if starts is not None:
            gathered = _pci_render.gather(txs, TERMINATIONS, PciTransaction)
    if gathered is None:
        s, cmd, addr, devsel, term, wide, nic, stranger, data, n = _scalar_fields(txs)
    else:
        columns, flags, kinds, *phases = gathered
        s, cmd, addr, devsel, term, n, perr_counts, be_bits, tw_sum, mw_sum = np.frombuffer(
            columns, np.int64).reshape(10, count)
        addr = addr.view(np.uint64)
        wide, nic = np.frombuffer(flags, np.bool_).reshape(2, count)
        stranger = np.zeros(count, np.bool_)
    off = np.cumsum(n) - n

    _fail(s < 0, s, "start_clk must be >= 0")
    _fail(term < 0, s, f"unknown termination; use one of {TERMINATIONS}")
    _fail(stranger, s, "master must be 'host' or 'nic'")
    _fail((cmd < 0) | (cmd > 15), s, "command must be a C/BE# code 0..15")
    _fail(cmd == DAC_COMMAND, s, "Dual Address Cycle is a prefix: give the command and an address >= 2**32")
    _fail((devsel < 0) | (devsel > DEVSEL_WINDOW), s, "devsel must be 0 (none) or 1..4")
    _fail((devsel == 0) != (term == _MABORT), s, "master_abort goes with devsel=0 and only with it")
    _fail(np.isin(cmd, list(UNCLAIMED_COMMANDS)) & (devsel != 0), s, "no target may claim this command (spec 3.1.1)")
    _fail((n == 0) & (term != _TABORT), s, "empty data (only target_abort may have no data phase)")
    dac = addr >= np.uint64(1 << 32)
    memory = np.isin(cmd, list(MEMORY_COMMANDS))
    _fail(dac & ~memory, s, "64-bit addresses (DAC) are for memory commands only")
    _fail(wide & (width_bits != 64), s, "wide (64-bit) transfer on a 32-bit bus")
    _fail(wide & ~memory, s, "only memory commands may transfer 64 bits (spec 3.8)")
    _fail(wide & ((addr & np.uint64(4)) != 0), s, "64-bit transfers start QWORD aligned (address bit 2 = 0)")

    if gathered is None:
        data = _phase_field(data, n, off, s, np.uint64, "data")
        be = _phase_field([t.byte_enables for t in txs], n, off, s, np.int64, "byte_enables")
    else:
        data = np.frombuffer(phases[0], np.uint64)
        be, tw, mw = (np.frombuffer(column, np.int64) for column in phases[1:])
    lanes = np.where(wide, 0xFF, 0x0F)
    beyond = np.flatnonzero(be > np.repeat(lanes, n))
    _fail(_per_txn(_owners(off, beyond), count), s, "byte_enables name lanes beyond the transfer width")
    mwi = np.flatnonzero(cmd == MWI_COMMAND)
    mwi_phases = _ranges(off[mwi], n[mwi])
    mwi_short = mwi_phases[be[mwi_phases] != np.repeat(lanes[mwi], n[mwi])]
    _fail(_per_txn(_owners(off, mwi_short), count), s, "Memory Write and Invalidate enables every byte lane")
    if gathered is None:
        tw = _phase_field([t.target_waits for t in txs], n, off, s, np.int64, "target_waits")
        mw = _phase_field([t.master_waits for t in txs], n, off, s, np.int64, "master_waits")
        perr = [t.parity_error_phases for t in txs]
        perr_counts = np.fromiter(map(len, perr), np.int64, count)
        be_bits, tw_sum, mw_sum = (_phase_sums(v, off, n) for v in (np.bitwise_count(be), tw, mw))
    else:
        perr = [txs[i].parity_error_phases for i in np.flatnonzero(perr_counts)]
    perr_k = np.fromiter(chain.from_iterable(perr), np.int64, int(perr_counts.sum()))
    perr_t = np.repeat(np.arange(count, dtype=np.int64), perr_counts)
    done = _completed_phases(term, n)
    unfinished = perr_t[(perr_k < 0) | (perr_k >= done[perr_t])]
    _fail(_per_txn(unfinished, count), s, "parity_error_phases must name data phases that complete")
    perr_phase = np.zeros(be.size, np.bool_)
    perr_phase[off[perr_t] + perr_k] = True
    return _Batch(
        s=s,
        cmd=cmd,
        addr=addr,
        dac=dac,
        rd=np.isin(cmd, list(READ_COMMANDS)),
        devsel=devsel,
        term=term,
        n=n,
        wide=wide,
        nic=nic,
        kind=np.array([t.kind for t in txs], dtype="S16").reshape(count) if gathered is None
        else np.frombuffer(kinds, "S16"),
        off=off,
        be_bits=be_bits,
        tw_sum=tw_sum,
        mw_sum=mw_sum,
        data=data,
        be=be,
        tw=tw,
        mw=mw,
        perr_phase=perr_phase,
    )


# -- timeline -----------------------------------------------------------------------------------


@dataclass(slots=True)
class _Timeline:
    """Clocks of every transaction (per txn) and data phase (per phase), absolute."""

    b0: np.ndarray
    dv: np.ndarray
    e0: np.ndarray
    t0: np.ndarray
    i0: np.ndarray
    t_last: np.ndarray
    p_last: np.ndarray
    frame_end: np.ndarray
    last: np.ndarray
    stop: np.ndarray
    done: np.ndarray
    begin: np.ndarray
    iready: np.ndarray
    tready: np.ndarray
    complete: np.ndarray
    transfers: np.ndarray


def _timeline(b: _Batch) -> _Timeline:
    count = b.s.size
    a = b.s + b.dac
    b0 = a + 1
    dv = a + b.devsel
    e0 = np.maximum(dv, b0 + b.rd)
    # Every phase's begin, IRDY#, TRDY# and completion clocks (module doc), in one pass in C.
    begin, iready, tready, complete = (np.empty(b.tw.size, np.int64) for _ in range(4))
    t0, i0, t_last, i_last, p_last = (np.empty(count, np.int64) for _ in range(5))
    _pci_render.phases(b0, e0, b.n, b.tw, b.mw, begin, iready, tready, complete, t0, i0, t_last, i_last, p_last)
    frame_end, last, stop = _end_clocks(b.term, b.n, a, dv, t0, i0, t_last, i_last, p_last, np.maximum, np.where)
    done = _completed_phases(b.term, b.n)
    return _Timeline(
        b0=b0,
        dv=dv,
        e0=e0,
        t0=t0,
        i0=i0,
        t_last=t_last,
        p_last=p_last,
        frame_end=frame_end,
        last=last,
        stop=stop,
        done=done,
        begin=begin,
        iready=iready,
        tready=tready,
        complete=complete,
        transfers=np.repeat(done > 0, b.n),  # done is all of n or none
    )


def _check_timeline(b: _Batch, tl: _Timeline) -> None:
    """Spec latency limits (3.5.1, 3.5.2) and the idle clock between transactions."""
    # A target abort on phase 0 has no given waits: its STOP# comes at dv + 1, always in time.
    answered = (b.devsel > 0) & (b.n > 0)
    _fail(answered & (tl.t0 - b.s > TARGET_INITIAL_LATENCY), b.s, "target initial latency exceeds 16 clocks")
    _fail(tl.i0 - b.s > MASTER_INITIAL_LATENCY, b.s, "master takes more than 8 clocks to assert IRDY#")
    first = b.off[b.n > 0]  # phase 0 has the initial latency limits above
    for waits, who in ((b.tw, "target"), (b.mw, "master")):
        slow = waits >= SUBSEQUENT_LATENCY
        slow[first] = False
        _fail(_per_txn(_owners(b.off, np.flatnonzero(slow)), b.s.size), b.s,
              f"{who} subsequent latency exceeds 8 clocks")
    gap = b.s[1:] - tl.last[:-1]
    _fail(np.append(gap <= TURNAROUND_CLOCKS, False), b.s, "the next transaction starts before the bus is idle again")


# -- control signals ----------------------------------------------------------------------------


@dataclass(slots=True)
class _Intervals:
    """Clocks ``[starts[i], ends[i])`` on which one active-low signal is asserted; sorted, disjoint."""

    starts: np.ndarray
    ends: np.ndarray


def _intervals(starts: np.ndarray, ends: np.ndarray) -> _Intervals:
    keep = ends > starts
    if not keep.all():
        starts, ends = starts[keep], ends[keep]
    # Per-phase signals arrive in bus order already: sorting those would only copy them.
    if (starts[1:] < starts[:-1]).any():
        order = np.argsort(starts, kind="stable")
        starts, ends = starts[order], ends[order]
    # paint() reads contiguous int64 arrays (interrupts come as the columns of a 2-D array).
    return _Intervals(np.ascontiguousarray(starts, np.int64), np.ascontiguousarray(ends, np.int64))


def _union(starts: np.ndarray, ends: np.ndarray) -> _Intervals:
    """Union of possibly overlapping intervals (INTA# is a shared, wired-OR line)."""
    iv = _intervals(starts, ends)
    if iv.starts.size == 0:
        return iv
    reach = np.maximum.accumulate(iv.ends)
    first = np.flatnonzero(np.concatenate([[True], iv.starts[1:] > reach[:-1]]))
    closing = np.append(first[1:] - 1, iv.starts.size - 1)
    return _Intervals(iv.starts[first], reach[closing])


def _control(b: _Batch, tl: _Timeline, interrupts: Sequence[tuple[int, int]], width_bits: int) -> list[_Intervals]:
    """Asserted intervals of every control signal, in channel order (module doc for the clocks)."""
    after_last = tl.last + 1
    moved = tl.done > 0
    # Per-phase clocks of the phases that transfer (usually all of them: no copies then).
    transferring: Callable[[np.ndarray], np.ndarray] = (
        (lambda x: x) if moved.all() else (lambda x: x[tl.transfers])
    )
    # IRDY# runs from each transferring phase's IRDY# clock to its completion; the last such run
    # (or, when nothing transfers, one run from phase 0's IRDY# clock) covers the final phase at L.
    # The runs are built in bus order, which is their order in time: no sort.
    irdy_start, irdy_end = tl.iready.copy(), tl.complete + 1
    irdy_end[(b.off + tl.done - 1)[moved]] = after_last[moved]
    idle = np.flatnonzero(~moved & (b.n > 0))  # the one run takes phase 0's place
    irdy_start[b.off[idle]], irdy_end[b.off[idle]] = tl.i0[idle], after_last[idle]
    shown = tl.transfers.copy()
    shown[b.off[idle]] = True
    empty = np.flatnonzero(b.n == 0)  # target aborts without data: a run of their own, between phases
    if empty.size:
        at = b.off[empty]
        irdy_start, irdy_end = np.insert(irdy_start, at, tl.i0[empty]), np.insert(irdy_end, at, after_last[empty])
        shown = np.insert(shown, at, True)
    irdy = _intervals(*((irdy_start, irdy_end) if shown.all() else (irdy_start[shown], irdy_end[shown])))
    stopped = (b.term != _NORMAL) & (b.term != _MABORT)
    claimed = b.devsel > 0
    # Target abort: DEVSEL# goes high on the clock STOP# is asserted (spec 3.3.3.2.1).
    devsel_end = np.where(b.term == _TABORT, tl.stop, after_last)
    nic = np.flatnonzero(b.nic)
    req_from = b.s[nic] - REQ_LEAD_CLOCKS
    if nic.size > 1:
        # After Retry/Disconnect REQ# stays high on the idle clock and the one before (spec 3.4.1).
        prev = nic[:-1]
        backoff = np.isin(b.term[prev], [_RETRY, _DWD, _DWOD])
        req_from[1:] = np.where(backoff, np.maximum(req_from[1:], tl.last[prev] + 2), req_from[1:])
    irq = np.asarray(interrupts, np.int64).reshape(-1, 2)
    if (irq[:, 1] < irq[:, 0]).any():
        raise ValueError("interrupts are (assert_clk, deassert_clk) pairs with assert_clk <= deassert_clk")
    bad_parity = np.flatnonzero(b.perr_phase)
    perr_at = tl.complete[bad_parity] + PERR_DELAY
    signals = {
        "FRAME#": _intervals(b.s, tl.frame_end),
        "IRDY#": irdy,
        "TRDY#": _intervals(transferring(tl.tready), transferring(tl.complete) + 1),
        "DEVSEL#": _intervals(tl.dv[claimed], devsel_end[claimed]),
        "STOP#": _intervals(tl.stop[stopped], after_last[stopped]),
        "REQ#": _intervals(req_from, b.s[nic]),
        "GNT#": _intervals(b.s[nic] - GNT_LEAD_CLOCKS, b.s[nic] + 1),
        "INTA#": _union(irq[:, 0], irq[:, 1]),
        "PERR#": _intervals(perr_at, perr_at + 1),
    }
    if width_bits == 64:
        ack = claimed & b.wide
        signals["REQ64#"] = _intervals(b.s[b.wide], tl.frame_end[b.wide])  # same timing as FRAME#
        signals["ACK64#"] = _intervals(tl.dv[ack], devsel_end[ack])  # same timing as DEVSEL#
    return [signals[name] for name in channels_for(width_bits, False, False)]


# -- AD, C/BE#, PAR -----------------------------------------------------------------------------


@dataclass(slots=True)
class _Stream:
    """Hold-last events of one group of lines: the value from ``clk[i]`` on is ``value[i]``."""

    clk: np.ndarray
    value: np.ndarray


def _stream(*parts: tuple[np.ndarray, Any]) -> _Stream:
    """Events from (clocks, values) parts; a stable sort keeps the given order of equal clocks."""
    clk = np.concatenate([np.asarray(c, np.int64) for c, _ in parts])
    value = np.concatenate([np.broadcast_to(np.asarray(v, np.uint64), np.shape(c)) for c, v in parts])
    order = np.argsort(clk, kind="stable")
    return _Stream(clk[order], value[order])


def _held(clocks: np.ndarray, stream: _Stream) -> np.ndarray:
    """Value of ``stream`` at each of ``clocks`` (sorted, a superset of its event clocks); 0 before."""
    latest = np.cumsum(np.bincount(np.searchsorted(clocks, stream.clk), minlength=clocks.size)) - 1
    out = np.zeros(clocks.size, np.uint64)
    seen = latest >= 0
    out[seen] = stream.value[latest[seen]]
    return out


@dataclass(slots=True)
class _Datapath:
    """AD/C/BE#/parity state at every clock where some of it changes; row 0 is the state before clock 0.

    ``low``: AD[31:0] | C/BE[3:0]# << 32 on a 32-bit bus, AD[63:0] on a 64-bit bus; ``high``:
    C/BE[7:0]# (64-bit bus only); ``parity``: PAR | PAR64 << 1 that this state yields one clock later.
    """

    clk: np.ndarray
    low: np.ndarray
    high: np.ndarray | None
    parity: np.ndarray


def _odd(*values: np.ndarray) -> np.ndarray:
    return (sum(np.bitwise_count(v).astype(np.uint64) for v in values) & np.uint64(1)).astype(np.uint64)


def _datapath(b: _Batch, tl: _Timeline, width_bits: int) -> _Datapath:
    dword = np.uint64(0xFFFFFFFF)
    memory = np.isin(b.cmd, list(MEMORY_COMMANDS))
    low_addr = np.where(memory, b.addr & np.uint64(0xFFFFFFFC), b.addr & dword)  # AD[1:0] = linear order
    high_addr = b.addr >> np.uint64(32)
    first_cmd = np.where(b.dac, DAC_COMMAND, b.cmd)
    ti = np.repeat(np.arange(b.s.size, dtype=np.int64), b.n)  # each phase's transaction
    k = np.arange(ti.size, dtype=np.int64) - b.off[ti]  # and its number there
    # Retry and master abort never leave phase 0; read data needs a target to drive it.
    reached = np.where((b.term == _RETRY) | (b.term == _MABORT), np.minimum(b.n, 1), b.n)
    shown = k < reached[ti]
    driven = shown & ~(b.rd & (b.devsel == 0))[ti]
    drive_at = np.where(b.rd[ti] & (k == 0), tl.e0[ti], tl.begin)
    cbe = ~b.be.astype(np.uint64)
    empty = b.n == 0
    empty_write = empty & ~b.rd
    dac = b.dac
    bad = b.perr_phase
    # PAR is wrong from the clock after the bad data is driven through the clock after completion.
    flips = np.stack([drive_at[bad], tl.complete[bad] + 1], axis=1).ravel()
    flip_values = np.tile(np.array([1, 0], np.uint64), int(bad.sum()))
    streams = [
        _stream(
            (b.s, low_addr),
            (b.s[dac] + 1, high_addr[dac]),
            (drive_at[driven], b.data[driven] & dword),
            (tl.b0[empty_write], 0),
        ),
        _stream(
            (b.s, first_cmd.astype(np.uint64)),
            (b.s[dac] + 1, b.cmd[dac].astype(np.uint64)),
            (tl.begin[shown], cbe[shown] & np.uint64(0xF)),
            (tl.b0[empty], 0xF),
        ),
        _stream((flips, flip_values)),
    ]
    if width_bits == 64:
        wide = b.wide[ti]
        wide_dac = b.wide & dac
        wide_bad = bad & wide
        flips64 = np.stack([drive_at[wide_bad], tl.complete[wide_bad] + 1], axis=1).ravel()
        streams += [
            _stream(
                (b.s[wide_dac], high_addr[wide_dac]),
                (drive_at[driven & wide], b.data[driven & wide] >> np.uint64(32)),
                (tl.b0[empty_write & b.wide], 0),
            ),
            _stream(
                (b.s[wide_dac], b.cmd[wide_dac].astype(np.uint64)),
                (tl.begin[shown & wide], (cbe[shown & wide] >> np.uint64(4)) & np.uint64(0xF)),
                (tl.b0[empty & b.wide], 0xF),
            ),
            _stream((flips64, np.tile(np.array([1, 0], np.uint64), int(wide_bad.sum())))),
        ]
    # The streams are sorted runs: a stable (merging) sort beats np.unique's hashing here.
    clocks = np.sort(np.concatenate([[np.iinfo(np.int64).min]] + [st.clk for st in streams]), kind="stable")
    clocks = clocks[np.concatenate([[True], clocks[1:] != clocks[:-1]])]
    held = [_held(clocks, st) for st in streams]
    ad_lo, cbe_lo, flip = held[:3]
    parity = _odd(ad_lo, cbe_lo) ^ flip
    if width_bits == 32:
        return _Datapath(clocks, ad_lo | (cbe_lo << np.uint64(32)), None, parity)
    ad_hi, cbe_hi, flip64 = held[3:]
    parity |= (_odd(ad_hi, cbe_hi) ^ flip64) << np.uint64(1)
    return _Datapath(clocks, ad_lo | (ad_hi << np.uint64(32)), cbe_lo | (cbe_hi << np.uint64(4)), parity)


# -- truth --------------------------------------------------------------------------------------


def _truth(b: _Batch, tl: _Timeline) -> np.ndarray:
    count = b.s.size
    moved = tl.done > 0  # a transaction's phases all transfer (done == n) or none do

    stopped = (b.term != _NORMAL) & (b.term != _MABORT)
    # Wait clocks count the data-phase clocks b0..L on which IRDY# (master) or both TRDY# and
    # STOP# (target) are deasserted: what a decoder measures on the wires. The transferring
    # phases fill b0..P_{n-1} one after the other, and phase k has IRDY# on from begin_k +
    # master_waits[k], TRDY# from begin_k + target_waits[k] (phase 0: from e0 + target_waits[0]).
    data_clocks = tl.last - tl.b0 + 1
    irdy_on = np.where(moved, tl.p_last - tl.b0 + 1 - b.mw_sum, 0) + np.where(
        moved, tl.last - tl.p_last, tl.last - tl.i0 + 1
    )
    stop_on = np.where(stopped, tl.last - tl.stop + 1, 0)
    both_on = np.where(b.term == _DWD, tl.p_last - tl.t_last + 1, 0)
    target_on = np.where(moved, tl.p_last - tl.e0 + 1 - b.tw_sum, 0) + stop_on - both_on
    out = np.zeros(count, TRUTH_DTYPE)
    out["ss"] = b.s
    out["es"] = tl.last + 1
    out["command"] = b.cmd
    out["command_name"] = np.array(COMMAND_NAMES, "S32")[b.cmd]
    out["address"] = b.addr
    out["dac"] = b.dac
    out["data_phases"] = tl.done
    out["bytes"] = np.where(moved, b.be_bits, 0)
    out["termination"] = np.array(TERMINATIONS, "S24")[b.term]
    out["kind"] = b.kind
    out["master"] = np.where(b.nic, b"nic", b"host")
    out["target_wait_clocks"] = data_clocks - target_on
    out["master_wait_clocks"] = data_clocks - irdy_on
    out["devsel"] = b.devsel
    out["wide"] = b.wide
    out["parity_error"] = _per_txn(_owners(b.off, np.flatnonzero(b.perr_phase)), count)
    out["stop_asserted"] = stopped
    return out


# -- packing ------------------------------------------------------------------------------------


def _record(unitsize: int) -> tuple[np.dtype, list[tuple[str, int]]]:
    """A packed record dtype of ``unitsize`` bytes made of u8/u4/u2/u1 fields, and field offsets.

    Writing whole fields with ``np.copyto(casting="unsafe")`` (which truncates) is several times
    faster than slicing bytes out of wider words. Fields are aligned to their own size, so none
    straddles the two 64-bit words of a sample.
    """
    names, formats, offsets = [], [], []
    offset = 0
    for size in (8, 4, 2, 1):
        while unitsize - offset >= size:
            names.append(f"b{offset}")
            formats.append(f"<u{size}")
            offsets.append(offset)
            offset += size
    dtype = np.dtype({"names": names, "formats": formats, "offsets": offsets, "itemsize": unitsize})
    return dtype, list(zip(names, offsets))


def _pack(words: Sequence[np.ndarray], unitsize: int) -> np.ndarray:
    """Sigrok-packed samples (1-D records) from little-endian 64-bit words of channel bits."""
    dtype, fields = _record(unitsize)
    out = np.empty(words[0].size, dtype)
    for name, offset in fields:
        word = words[offset // 8]
        shift = 8 * (offset % 8)
        np.copyto(out[name], word >> np.uint64(shift) if shift else word, casting="unsafe")
    return out


# -- the renderer -------------------------------------------------------------------------------


class PciRenderer:
    """Render transactions to per-clock PCI signals, block by block.

    ``transactions`` may come in any order (rows of :meth:`truth` are sorted by start clock);
    ``interrupts`` are ``(assert_clk, deassert_clk)`` pairs, INTA# being low on
    ``[assert_clk, deassert_clk)``. Everything is validated and precomputed here
    (ValueError on inconsistent input); :meth:`render` only paints arrays.
    """

    def __init__(
        self,
        transactions: Sequence[PciTransaction],
        *,
        width_bits: int,
        with_ad: bool,
        interrupts: Sequence[tuple[int, int]] = (),
    ):
        _check_width(width_bits)
        self.width_bits = width_bits
        self.with_ad = with_ad
        batch = _batch(transactions, width_bits)
        timeline = _timeline(batch)
        _check_timeline(batch, timeline)
        self._control = _control(batch, timeline, interrupts, width_bits)
        self._datapath = _datapath(batch, timeline, width_bits) if with_ad else None
        self._truth = _truth(batch, timeline)

    def channels(self, timing: bool = False) -> list[str]:
        """Channel names of :meth:`render` output (``timing``: with ``samples_per_clock``)."""
        return channels_for(self.width_bits, self.with_ad, timing)

    def truth(self) -> np.ndarray:
        """One :data:`TRUTH_DTYPE` row per transaction, by start clock."""
        return self.truth_view().copy()

    def truth_view(self) -> np.ndarray:
        """:meth:`truth` without the copy, read-only: for a caller that copies the rows it keeps."""
        rows = self._truth.view()
        rows.flags.writeable = False
        return rows

    def render(self, c0: int, c1: int, *, samples_per_clock: int | None = None) -> np.ndarray:
        """Packed samples ``(samples, unitsize)`` uint8 for clocks ``[c0, c1)``.

        State mode (default): one sample per clock, the values sampled at that rising edge.
        Timing mode (``samples_per_clock=k >= 2``): samples ``[c0*k, c1*k)`` with a leading CLK
        channel; clock ``c``'s edge is sample ``c*k``, its state is shown on samples
        ``(c-1)*k+1 .. c*k`` and CLK is high on the first ``k // 2`` samples from each edge.
        Blocks concatenate exactly, so a long capture can be rendered in pieces.
        """
        if not 0 <= c0 <= c1:
            raise ValueError(f"need 0 <= c0 <= c1, got {c0}, {c1}")
        if samples_per_clock is None:
            state = self._state(c0, c1, clk_slot=0)
            return state.view(np.uint8).reshape(c1 - c0, state.dtype.itemsize)
        k = samples_per_clock
        if k < 2:
            raise ValueError("timing mode needs at least 2 samples per clock to show CLK")
        state = self._state(c0, c1 + 1, clk_slot=1)
        samples = np.arange(c0 * k, c1 * k, dtype=np.int64)
        out = state.take((samples + (k - 1)) // k - c0).view(np.uint8).reshape(samples.size, state.dtype.itemsize)
        out[:, 0] |= (samples % k < k // 2).view(np.uint8)
        return out

    def _state(self, c0: int, c1: int, clk_slot: int) -> np.ndarray:
        """1-D packed records for clocks ``[c0, c1)``; ``clk_slot`` reserves bit 0 for CLK."""
        n_ctrl = len(self._control)
        unitsize = unitsize_for(clk_slot + len(channels_for(self.width_bits, self.with_ad, False)))
        if self._datapath is None and unitsize in (1, 2, 4, 8):
            # Control lines alone: a sample is one little-endian integer, painted in place.
            return self._paint_control(c0, c1, clk_slot, np.dtype(f"<u{unitsize}"))
        ctrl = self._paint_control(c0, c1, clk_slot, np.dtype(np.uint64))
        if self._datapath is None:
            return _pack([ctrl], unitsize)
        return _pack(self._datapath_words(c0, c1, clk_slot + n_ctrl, ctrl), unitsize)

    def _paint_control(self, c0: int, c1: int, clk_slot: int, dtype: np.dtype) -> np.ndarray:
        """Electrical control bits per clock, bit ``clk_slot`` on (in C: painting each asserted interval's
        clocks costs less than NumPy's passes over every clock of the block)."""
        out = np.empty(c1 - c0, dtype)
        idle_high = ((1 << len(self._control)) - 1) << clk_slot
        _pci_render.paint(out, c0, clk_slot, idle_high, [(iv.starts, iv.ends) for iv in self._control])
        return out

    def _datapath_words(self, c0: int, c1: int, first_bit: int, ctrl: np.ndarray) -> list[np.ndarray]:
        """Control bits plus AD, C/BE#, PAR(64) placed from ``first_bit`` on, as 64-bit words."""
        dp = self._datapath
        assert dp is not None
        n = c1 - c0
        # Row of the datapath state for clocks c0-1 .. c1-1 (PAR needs the previous clock).
        r0 = int(np.searchsorted(dp.clk, c0 - 1, "right")) - 1
        r1 = int(np.searchsorted(dp.clk, c1 - 1, "right"))
        row = np.zeros(n + 1, np.int64)
        row[dp.clk[r0 + 1 : r1] - (c0 - 1)] = 1
        np.cumsum(row, out=row)
        row += r0
        parity = dp.parity.take(row[:-1])
        low = dp.low.take(row[1:])
        shift = np.uint64(first_bit)
        if dp.high is None:
            low |= parity << np.uint64(36)  # AD[31:0], C/BE[3:0]#, PAR
            low <<= shift
            low |= ctrl
            return [low]
        high = dp.high.take(row[1:])
        high |= parity << np.uint64(8)  # C/BE[7:0]#, PAR, PAR64
        high <<= shift
        high |= low >> np.uint64(64 - first_bit)
        low <<= shift
        low |= ctrl
        return [low, high]


def _bench(clocks: int, width_bits: int, busy_share: float = 0.45, block: int = 1 << 20) -> None:
    """Print render throughput for a synthetic NIC-like load filling ``busy_share`` of the bus."""
    import time

    rng = np.random.default_rng(1)
    transactions = []
    clk = 8
    while clk < clocks - 200:
        burst = rng.random() < 0.7  # DMA bursts; the rest are single-dword CSR accesses
        n = int(rng.integers(4, 33)) if burst else 1
        wide = burst and width_bits == 64
        sparse = rng.random(n) < 0.1
        t = PciTransaction(
            start_clk=clk,
            command=int(rng.choice([0x7, 0xC])) if burst else int(rng.choice([0x6, 0x7])),
            address=int(rng.integers(0, 1 << 20)) * 8,
            data=rng.integers(0, 1 << 63, n, dtype=np.uint64),
            byte_enables=np.full(n, 0xFF if wide else 0xF, np.uint8),
            target_waits=np.where(sparse, rng.integers(0, 3, n), 0),
            master_waits=np.where(rng.random(n) < 0.05, 1, 0),
            devsel=int(rng.integers(1, 3)),
            termination="disconnect_with_data" if burst and rng.random() < 0.05 else "normal",
            wide=wide,
            master="nic" if burst else "host",
        )
        transactions.append(t)
        busy = busy_clocks(t, width_bits)
        clk += busy + TURNAROUND_CLOCKS + int(rng.geometric(1 / (busy * (1 - busy_share) / busy_share)))
    for with_ad in (False, True):
        t0 = time.perf_counter()
        renderer = PciRenderer(transactions, width_bits=width_bits, with_ad=with_ad)
        t1 = time.perf_counter()
        for c0 in range(0, clocks, block):
            renderer.render(c0, min(c0 + block, clocks))
        t2 = time.perf_counter()
        truth = renderer.truth()
        share = float((truth["es"] - truth["ss"]).sum()) / clocks
        print(
            f"{width_bits}-bit bus, AD {'on ' if with_ad else 'off'}: {len(transactions)} transactions, "
            f"{share:.0%} busy, init {t1 - t0:.1f} s, "
            f"render {clocks / (t2 - t1) / 1e6:.1f} M clocks/s"
        )


if __name__ == "__main__":
    import sys

    _bench(int(float(sys.argv[1])) if len(sys.argv) > 1 else 10_000_000, int(sys.argv[2]) if len(sys.argv) > 2 else 64)
