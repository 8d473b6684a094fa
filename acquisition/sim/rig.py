"""Run the simulated rig and record it as a capture set, as the real rig's instruments would.

Sources written (docs/simulator.md):

* ``send_pci`` / ``recv_pci``: each host's PCI bus as a state-mode logic
  analyzer records it (one sample per rising clock edge, timestamps in ps),
  or in timing mode with a ``CLK`` channel when ``samples_per_clock`` is given;
* ``probe``: the GMII at host A (TX = A to B, RX = B to A), one sample per
  125 MHz clock;

plus ground truth under ``truth/``, and the applications' own measurements
as udpmon results in the group ``results/`` (:mod:`nicrig.acquisition.sim.application`).
The trigger (zero of the common timeline) is the first FRAME# on the sending
bus. The instruments record the whole run, or, as a logic analyzer whose
memory fills, only the exchanges of the run's first ``Recording.messages``
messages (the results always cover every message).
"""

from __future__ import annotations

import bisect
import json
import math
import os
import sys
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from operator import attrgetter, itemgetter
from typing import Any

import numpy as np
from nicrig.acquisition.capture import (
    DEFAULT_CHUNK_SAMPLES,
    CaptureSet,
    EncodedBlock,
    SourceSpec,
    encode_block,
)
from nicrig.acquisition.sim import application, forked, gmii, pci_bus
from nicrig.acquisition.sim._clock import Clock
from nicrig.acquisition.sim.ethernet import Frame, frame_time_on_wire_ns
from nicrig.acquisition.sim.model import (
    GMII_PERIOD_PS,
    INTERRUPT_DTYPE,
    PACKET_DTYPE,
    BusRecord,
    Rig,
    RigRun,
    Scenario,
)
from nicrig.acquisition.sim.profiles import BusProfile, HostProfile, NicProfile
from nicrig.cpus import usable_cpus
from nicrig.udpmon.results import RESULTS_GROUP, ResultsFile

BLOCK_CLOCKS = 1 << 20
#: How often (ps of simulated time) the model lets the renderer hand finished blocks to a worker: a block
#: lasts 8 ms (the probe's 1 Mi clocks at 125 MHz) or more, and a worker done with its blocks waits for the next
#: checkpoint, ~10 ms of the model's CPU apart at this period on the saturated stream (a checkpoint costs a
#: few microseconds when no worker is free).
CHECKPOINT_PS = 500_000_000
#: Blocks a worker is given at least while the model runs.
WORKER_BLOCKS = 3
#: The recording runs on this long after the last exchange it holds (us), as after the run's end.
TAIL_US = 20.0
#: A recording that stops early stops at least this long after the end of every transaction and frame it holds
#: (ns): a few clocks of idle bus, so that the decoders see each one end.
STOP_MARGIN_NS = 200
MSI_WINDOW = [0xFEE00000, 0x100000]
#: Jobs of the run's end (:meth:`_Renderer.finish`): the probe's truth tables, the applications' measurements.
_PROBE_TABLES, _MEASURED = "probe tables", "measured"
Progress = Callable[[str, int, int], None]


@dataclass(frozen=True)
class Recording:
    """How the simulated instruments record: AD/C/BE#/PAR or control lines only; state or timing mode; the
    exchanges of the first ``messages`` messages host A's application sent (stream datagrams or requests), or the
    whole run (0)."""

    with_ad: bool = False
    samples_per_clock: int | None = None
    messages: int = 0


def _block_times(clock: Clock, c0: int, c1: int) -> np.ndarray:
    """Times (ps) of rising edges ``[c0, c1)`` of ``clock``: a state-mode block's timestamps, in one C pass."""
    return clock.time_range(c0, np.empty(c1 - c0, dtype=np.int64))


def _times_of(clock: Clock, clocks: np.ndarray) -> np.ndarray:
    """Times (ps) of rising edges ``clocks`` (int64) of ``clock``, each as ``clock.time_of`` gives it."""
    return clock.times_of(clocks, np.empty(len(clocks), dtype=np.int64))


def _with_columns(table: np.ndarray, **columns: np.ndarray) -> np.ndarray:
    """``table`` with extra columns appended (NumPy's recfunctions does this a row at a time).

    The new dtype's ``descr`` starts with the table's, padding included, so each new row starts with the bytes
    of the old one: those are copied as one block of rows (a field at a time took twice as long).
    """
    extra = [(name, np.asarray(col).dtype.str) for name, col in columns.items()]
    out = np.empty(len(table), dtype=table.dtype.descr + extra)
    rows = len(table)
    out.view(np.uint8).reshape(rows, out.itemsize)[:, :table.itemsize] = \
        np.ascontiguousarray(table).view(np.uint8).reshape(rows, table.itemsize)
    for name, col in columns.items():
        out[name] = col
    return out


class _JoinedRows:
    """Tables of one structured dtype end to end in one of ``total`` rows, each copied in as it comes, so that it
    can go at once (a bus's blocks' truth: ~100 MB on the saturated stream's sending bus, held twice when joined
    at the end), as whole rows (``np.concatenate`` copies a structured dtype a field at a time: ~6x as long for a
    bus's 20 columns)."""

    def __init__(self, total: int):
        self.total, self.filled = total, 0
        self.table: np.ndarray | None = None

    def add(self, rows: np.ndarray) -> None:
        """Copy ``rows`` in after those added before."""
        if self.table is None:
            self.table = np.empty(self.total, rows.dtype)
        elif rows.dtype != self.table.dtype:
            raise TypeError(f"tables of different dtypes: {sorted({str(rows.dtype), str(self.table.dtype)})}")
        end = self.filled + len(rows)
        if end > self.total:
            raise ValueError(f"{end} rows joined into a table of {self.total}")
        row = np.dtype((np.void, rows.dtype.itemsize))
        self.table.view(row)[self.filled:end] = np.ascontiguousarray(rows).view(row)
        self.filled = end

    def joined(self) -> np.ndarray:
        """The table, every row added."""
        if self.table is None or self.filled != self.total:
            raise ValueError(f"{self.filled} rows joined into a table of {self.total}")
        return self.table


def _rows_concatenated(tables: Sequence[np.ndarray]) -> np.ndarray:
    """Tables of one structured dtype end to end (:class:`_JoinedRows`)."""
    joined = _JoinedRows(sum(map(len, tables)))
    for table in tables:
        joined.add(table)
    return joined.joined()


def _blocks(n_clocks: int, block_clocks: int = BLOCK_CLOCKS) -> Iterator[tuple[int, int]]:
    """Clock ranges to render and append one at a time, so memory stays bounded for deep captures."""
    for c0 in range(0, n_clocks, block_clocks):
        yield c0, min(n_clocks, c0 + block_clocks)


def source_clocks(run: RigRun, name: str) -> int:
    """Clocks (samples in state mode) that source ``name`` (``send_pci``, ``recv_pci``, ``probe``) records."""
    if name == "probe":
        return max(1, run.probe_clock.at_or_after(run.end_ps))
    return run.buses[name].clock_at_or_after(run.end_ps)


#: Clocks after a block's last that can still shape it: REQ# and GNT# rise before the FRAME# they lead
#: to, and timing mode shows the state of the clock after the block's last (:meth:`PciRenderer.render`).
WINDOW_LEAD_CLOCKS = pci_bus.REQ_LEAD_CLOCKS + 2


def _pci_window(bus: BusRecord, c0: int, c1: int) -> slice:
    """Where, in ``bus.transactions`` (in start order, as a bus puts them), those that shape clocks
    ``[c0, c1]`` of the bus are.

    One bus carries one transaction at a time, so the last to start before ``c0`` (one more kept for
    margin) is the earliest that reaches into the block: its lines, or the AD value the bus holds after
    it, and the REQ# of the next NIC transaction, which depends on the NIC's previous one only when that
    ended just before it. On a 64-bit bus, AD[63:32] and C/BE[7:4]# hold what the last 64-bit transfer
    left on them, however long ago (found by :attr:`BusRecord.wide`, not by reading the bus back). Those
    that start more than :data:`WINDOW_LEAD_CLOCKS` after ``c1`` cannot.
    """
    start, transactions = attrgetter("start_clk"), bus.transactions
    lo = max(0, bisect.bisect_left(transactions, c0, key=start) - 2)
    if bus.profile.width_bits == 64:
        # Before the first 64-bit transfer AD[63:32] holds 0, as it does in a window without one.
        last_wide = bisect.bisect_right(bus.wide, lo) - 1
        lo = bus.wide[last_wide] if last_wide >= 0 else lo
    return slice(lo, bisect.bisect_right(transactions, c1 + WINDOW_LEAD_CLOCKS, key=start))


def _probe_window(frames: Sequence[tuple[int, Frame]], c0: int, c1: int) -> Sequence[tuple[int, Frame]]:
    """The frames (in start order) on the GMII during clocks ``[c0, c1)``: frames of one direction never
    overlap, so only the last to start before ``c0`` can reach into the block."""
    lo = max(0, bisect.bisect_left(frames, c0, key=itemgetter(0)) - 1)
    return frames[lo:bisect.bisect_left(frames, c1, key=itemgetter(0))]


@dataclass(frozen=True)
class _Block:
    """A rendered block of a source: its samples, their timestamps (state mode) or both encoded as the
    capture set stores them (timestamps then None), and on a bus the ground truth of the transactions that
    start in it, with their times on the bus's clock and what each was for."""

    samples: np.ndarray | EncodedBlock
    timestamps: np.ndarray | None
    truth: np.ndarray | None = None


@dataclass(frozen=True)
class _Table:
    """A ground-truth table of a source, as :meth:`CaptureSet.write_table` takes it."""

    path: str
    rows: np.ndarray
    units: dict[str, str]
    description: str


@dataclass(frozen=True)
class _Sources:
    """What the instruments recorded of a run, and how: everything rendering a source needs.

    ``run`` may be what a run still going has recorded so far (:meth:`_Renderer.checkpoint`): then only
    blocks that nothing the model does from then on can change are rendered (:meth:`final_clock`).
    """

    run: RigRun
    nic: NicProfile
    #: Host A's and host B's profiles (send_pci is A's bus, recv_pci B's).
    hosts: tuple[HostProfile, HostProfile]
    recording: Recording
    block_clocks: int = BLOCK_CLOCKS

    @property
    def names(self) -> list[str]:
        return [*self.run.buses, "probe"]

    @property
    def chunk_samples(self) -> int:
        """Samples per HDF5 chunk: blocks begin on chunk boundaries (each is stored as whole chunks)."""
        return min(DEFAULT_CHUNK_SAMPLES, self.block_clocks)

    def clocks(self, name: str) -> int:
        return source_clocks(self.run, name)

    def blocks(self, name: str) -> list[tuple[int, int]]:
        """The clock ranges of source ``name``'s recording, in order."""
        return list(_blocks(self.clocks(name), self.block_clocks))

    def final_clock(self, name: str, t_ps: int) -> int:
        """How far (exclusive) source ``name`` can be rendered once the model has done everything before
        ``t_ps``: every transaction or frame it starts from then on begins at a clock edge at or after it."""
        if name == "probe":
            return self.run.probe_clock.at_or_after(t_ps) - 1
        return self.run.buses[name].clock_at_or_after(t_ps) - WINDOW_LEAD_CLOCKS - 1

    def spec(self, name: str) -> SourceSpec:
        """The source's description (channels, mode, rates, trigger) in the capture set."""
        run = self.run
        if name == "probe":
            trig = run.probe_clock.at_or_after(run.trigger_ps)
            return SourceSpec("probe", PROBE_CHANNELS, "state", samplerate_hz=125e6, trigger_sample=trig,
                              offset_ps=run.probe_clock.time_of(trig) - run.trigger_ps,
                              bus={"kind": "gmii", "link_rate_bps": 1e9, "at": "host A (send)"},
                              roles={**gmii.ROLES, "act": "LINK_ACT"},
                              instrument={"model": "nicrig simulated GMII probe", "mode": "state",
                                          "clock": "125 MHz GTX_CLK"})
        bus, rec = run.buses[name], self.recording
        prof = bus.profile
        timing = rec.samples_per_clock is not None
        meta = {
            "kind": prof.kind,
            "profile": prof.name,
            "width_bits": prof.width_bits,
            "clock_hz": prof.clock_hz,
            "bars": [list(self.nic.bar0)],
            "msi_window": MSI_WINDOW,
            "device": self.nic.vendor_device,
            "nic": self.nic.name,
            "host": self.hosts[name != "send_pci"].name,
        }
        trig_clk = bus.clock_at_or_after(run.trigger_ps)
        offset = bus.time_of(trig_clk) - run.trigger_ps
        channels = pci_bus.channels_for(prof.width_bits, rec.with_ad, timing)
        roles = pci_bus.roles_for(prof.width_bits, rec.with_ad, timing)
        if timing:
            k = int(rec.samples_per_clock)  # type: ignore[arg-type]
            # Sample j of the timing capture lies at phase + j/k clock periods.
            return SourceSpec(name, channels, "timing", samplerate_hz=prof.clock_hz * k, trigger_sample=trig_clk * k,
                              offset_ps=offset, bus=meta, roles=roles,
                              instrument={"model": "nicrig simulated logic analyzer", "mode": "timing",
                                          "samples_per_clock": k})
        return SourceSpec(name, channels, "state", samplerate_hz=prof.clock_hz, trigger_sample=trig_clk,
                          offset_ps=offset, bus=meta, roles=roles,
                          instrument={"model": "nicrig simulated logic analyzer", "mode": "state",
                                      "clock": "PCI CLK rising edge"})

    def render(self, name: str, c0: int, c1: int, n_clocks: int | None = None) -> _Block:
        """Clocks ``[c0, c1)`` of source ``name``.

        ``n_clocks``: the recording's length, where an interrupt still asserted at the end is shown to end;
        None while the run goes on (the block then lies before any such end).
        """
        run = self.run
        if name == "probe":
            renderer = gmii.GmiiRenderer(_probe_window(run.probe_tx, c0, c1), _probe_window(run.probe_rx, c0, c1))
            return _Block(renderer.render(c0, c1, tx_en_copy=_LINK_ACT_CHANNEL),
                          _block_times(run.probe_clock, c0, c1))
        bus, rec = run.buses[name], self.recording
        prof = bus.profile
        reach = c1 + WINDOW_LEAD_CLOCKS
        pending_end = reach if n_clocks is None else n_clocks
        window = _pci_window(bus, c0, c1)
        renderer = pci_bus.PciRenderer(bus.transactions[window], width_bits=prof.width_bits, with_ad=rec.with_ad,
                                       interrupts=[(a, b if b >= 0 else pending_end)
                                                   for a, b in bus.interrupts if a <= reach])
        # The block's own transactions (the last block's: all that are left), with their times (from the bus's
        # clock, not yet the trigger: the run may still be going) and what each was for. The rows are in start
        # order, so the block's are one run of them, copied once (into the wider table).
        rows = renderer.truth_view()
        lo = int(np.searchsorted(rows["ss"], c0))
        hi = len(rows) if c1 == n_clocks else int(np.searchsorted(rows["ss"], c1))
        truth, clock = rows[lo:hi], bus.clock
        truth = _with_columns(truth, t_start_ps=_times_of(clock, truth["ss"]), t_end_ps=_times_of(clock, truth["es"]),
                              purpose=np.array(bus.purposes[window][lo:hi], dtype="S20"))
        if rec.samples_per_clock is not None:
            return _Block(renderer.render(c0, c1, samples_per_clock=int(rec.samples_per_clock)), None, truth)
        return _Block(renderer.render(c0, c1), _block_times(clock, c0, c1), truth)

    def tables(self, name: str, truth: np.ndarray | None) -> list[_Table]:
        """Source ``name``'s ground truth (``truth/<name>/...``), on the common timeline; a bus's is made of
        its blocks' truth (:meth:`render`) end to end, ``truth`` (changed here); the probe's needs none."""
        run = self.run
        if name == "probe":
            frames = gmii.GmiiRenderer(run.probe_tx, run.probe_rx).truth()
            table = _with_columns(
                frames,
                t_start_ps=_times_of(run.probe_clock, frames["ss"]) - run.trigger_ps,
                t_end_ps=_times_of(run.probe_clock, frames["es"]) - run.trigger_ps,
            )
            return [_Table("truth/probe/frames", table,
                           {"ss": "clock", "es": "clock", "t_start_ps": "ps", "t_end_ps": "ps", "length": "byte"},
                           "every frame on the link at host A's GMII, both directions")]
        bus = run.buses[name]
        clock = bus.clock
        n_clocks = self.clocks(name)
        irqs = [(a, b if b >= 0 else n_clocks) for a, b in bus.interrupts]
        if truth is None:
            raise ValueError(f"{name}: a bus's tables are made of its blocks' truth")
        table = truth
        table["t_start_ps"] -= run.trigger_ps
        table["t_end_ps"] -= run.trigger_ps
        clocks = np.array(irqs, dtype=np.int64).reshape(-1, 2)
        irq = np.zeros(len(clocks), dtype=[("ss", "<i8"), ("es", "<i8"), ("t_assert_ps", "<i8"),
                                           ("t_deassert_ps", "<i8")])
        irq["ss"], irq["es"] = clocks[:, 0], clocks[:, 1]
        irq["t_assert_ps"] = _times_of(clock, irq["ss"]) - run.trigger_ps
        irq["t_deassert_ps"] = _times_of(clock, irq["es"]) - run.trigger_ps
        return [
            _Table(f"truth/{name}/transactions", table,
                   {"ss": "clock", "es": "clock", "t_start_ps": "ps", "t_end_ps": "ps", "bytes": "byte"},
                   f"every PCI transaction the model put on {name}, in bus order"),
            _Table(f"truth/{name}/interrupts", irq, {"t_assert_ps": "ps", "t_deassert_ps": "ps"},
                   f"INTA# low intervals on {name}"),
        ]


#: The probe's channels: the GMII at host A, and a frame-presence wire for A to B
#: like Hughes-Jones et al.'s (2003) Gigabit Ethernet probe card (figure 4.3's bottom traces): high while A's frame
#: (preamble to FCS) is on the medium, TX_EN's copy (:meth:`GmiiRenderer.render`).
PROBE_CHANNELS = [*gmii.CHANNELS, "LINK_ACT"]
_LINK_ACT_CHANNEL = PROBE_CHANNELS.index("LINK_ACT")


def _render_task(sources: _Sources, final: bool, task: tuple[str, int, int]) -> _Block:
    """Render block ``(name, c0, c1)`` (``final``: of the run as recorded, whose end is known; else of the
    run still going)."""
    name, c0, c1 = task
    return sources.render(name, c0, c1, sources.clocks(name) if final else None)


def _encoded_task(sources: _Sources, final: bool, task: tuple[str, int, int]) -> _Block:
    """:func:`_render_task` in a worker: it compresses the block too, so that this process only stores it."""
    block = _render_task(sources, final, task)
    return replace(block, samples=encode_block(block.samples, block.timestamps, sources.chunk_samples),
                   timestamps=None)


def _final_task(sources: _Sources, jobs: Mapping[str, Callable[[], Any]], task: str | tuple[str, int, int]) -> Any:
    """A task of the run's end in a worker: a job by name (:meth:`_Renderer.finish`), or a block to render and
    compress."""
    return jobs[task]() if isinstance(task, str) else _encoded_task(sources, True, task)


def _workers(workers: int | None) -> int:
    """Processes rendering (default: one per usable CPU, this one included; 1: all here)."""
    return max(1, usable_cpus() if workers is None else workers) if forked.can_fork() else 1


class _Renderer:
    """Renders a run's sources into a capture set, on ``workers`` CPUs.

    While the model runs (the whole run recorded), the blocks it can no longer change are rendered and
    compressed in a forked worker on another CPU (:mod:`forked`); once it has ended (:meth:`finish`), what
    is left, and the other work of the run's end (jobs: the probe's tables, the caller's), is shared among
    ``workers`` more, started at once, and this process stores what they send back (:meth:`store`,
    :meth:`job`). With one worker, everything is done here, when asked for. The capture set is the same
    either way.
    """

    def __init__(self, rig: Rig, sources: Callable[[RigRun], _Sources], recording: Recording, workers: int,
                 progress: Progress | None):
        self.rig, self.sources, self.workers, self.progress = rig, sources, workers, progress
        # The model's workers - 1 (it keeps a CPU) and, once it has ended, a share for each of the workers.
        self.pool = forked.ForkPool(2 * workers - 1) if workers > 1 else None
        self.next_c0: dict[str, int] = {}
        self.final: _Sources | None = None  # the run as recorded, once the model has ended
        self.jobs: dict[str, Callable[[], Any]] = {}
        # A recording cut short (fewer messages than the run sends, recorded_part) changes the blocks near its
        # end: those wait for the model's end. One of as many messages as the run sends or more is the whole run.
        sc = rig.scenario
        sent = sum(p.count for p in sc.points())  # stream datagrams or requests
        self.live = self.pool is not None and not 0 < recording.messages < sent
        self.messages = sent * (2 if sc.kind == "latency" else 1)

    @property
    def checkpoints(self) -> Callable[[int], None] | None:
        """What the model calls as it goes (:meth:`checkpoint`), if anything is to be done then."""
        return self.checkpoint if self.live or self.progress else None

    def __enter__(self) -> _Renderer:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.pool is not None:
            self.pool.close()

    def checkpoint(self, t_ps: int) -> None:
        """The model has done everything before ``t_ps``: say how far it is, and hand the blocks that became
        final to a worker."""
        if self.progress:
            self.progress("model", len(self.rig.packets), self.messages)
        if not self.live or self.pool.running >= self.workers - 1:  # the model keeps one CPU
            return
        # The model's last checkpoint comes after its last event (up to a checkpoint period later), where the
        # recording's end (the tail after that event) is not known yet: blocks handed out then would run past
        # it, rendered for nothing or as other than the last block. finish() hands out the rest.
        if self.rig.env.peek() == math.inf:
            return
        rig = self.rig
        # What the model recorded so far (a copy of it, in the worker's memory once forked).
        live = self.sources(RigRun(buses=rig.buses, probe_tx=rig.probe_tx, probe_rx=rig.probe_rx,
                                   probe_phase_ps=rig.probe_phase_ps, packets=[], interrupts=[], counters={},
                                   trigger_ps=0, end_ps=t_ps))
        tasks = [(name, c0, c0 + live.block_clocks) for name in live.names
                 for c0 in range(self.next_c0.get(name, 0), live.final_clock(name, t_ps) - live.block_clocks + 1,
                                 live.block_clocks)]
        # A fork costs this process its page tables' copy and the pages it writes after: a few blocks each.
        if len(tasks) >= WORKER_BLOCKS:
            self.pool.submit(tasks, partial(_encoded_task, live, False))
            for name, _, c1 in tasks:
                self.next_c0[name] = c1

    def finish(self, run: RigRun, jobs: Mapping[str, Callable[[], Any]] | None = None) -> None:
        """The model has ended with ``run`` (as recorded): share what is left to render, and ``jobs`` (work for
        the end of the run, by name, whose results :meth:`job` gives; pure, with picklable results), among the
        workers, each share in a worker of its own started now."""
        self.final = sources = self.sources(run)
        # The probe's tables need none of its blocks (the buses' are made of theirs).
        self.jobs = {_PROBE_TABLES: partial(sources.tables, "probe", None), **(jobs or {})}
        if self.pool is None:
            return
        # Handed out while the model ran: the whole blocks before next_c0 (the same in the run as recorded).
        left = {name: [(name, c0, c1) for c0, c1 in sources.blocks(name) if c0 >= self.next_c0.get(name, 0)]
                for name in sources.names}
        # In the order store() takes them, but the jobs, whose results it needs last, after the first source's
        # blocks: they run while store() writes that bus's table (~0.4 s on the saturated stream). Ahead of the
        # blocks they held back those store() waited for; behind the buses' or all the blocks, a share's next
        # block waited for the caller's job (~0.4 s of CPU, most of it importing SciPy).
        first, *rest = sources.names
        todo = [*left[first], *self.jobs, *(task for name in rest for task in left[name])]
        # Dealt out in turn, each share in order, every share started now beside the workers still busy with
        # what they were handed while the model ran, so that the CPUs stay busy to the end (a share waiting for
        # one of them left a CPU idle meanwhile, up to the length of the last batch handed out).
        for k in range(self.workers):
            if share := todo[k::self.workers]:
                self.pool.submit(share, partial(_final_task, sources, self.jobs))

    def job(self, name: str) -> Any:
        """The result of job ``name`` (:meth:`finish`): from the worker that has it (waiting for it), or made here."""
        return self._result(name, self.jobs[name])

    def _block(self, task: tuple[str, int, int]) -> _Block:
        """Block ``task``, rendered: from the worker that has it (waiting for it), or here."""
        return self._result(task, partial(_render_task, self.final, True, task))

    def _result(self, task: Hashable, here: Callable[[], Any]) -> Any:
        if self.pool is None or not self.pool.wait_for(task):  # no worker was given it
            return here()
        return self.pool.pop(task)

    def store(self, cs: CaptureSet, stored: Stored) -> None:
        """Store every source and its tables in ``cs``, each block as soon as its worker is done with it
        (rendering here what no worker did: everything, with one worker), and note them in ``stored``."""
        sources, progress = self.final, self.progress
        assert sources is not None, "store() comes after finish()"
        for name in sources.names:
            w = cs.add_source(sources.spec(name), chunk_samples=sources.chunk_samples)
            n_clocks = sources.clocks(name)
            # A bus's table: each of its transactions starts in one block, whose truth holds its row.
            truth = None if name == "probe" else _JoinedRows(len(sources.run.buses[name].transactions))
            for c0, c1 in sources.blocks(name):
                block = self._block((name, c0, c1))
                if isinstance(block.samples, EncodedBlock):
                    w.append_encoded(block.samples)
                else:
                    w.append(block.samples, block.timestamps)
                if truth is not None:
                    truth.add(block.truth)
                if progress:
                    progress(name, c1, n_clocks)
            stored.sources[name] = {"samples": w.num_samples, "mode": w.mode, "duration_us": w.duration_ps / 1e6}
            for table in (self.job(_PROBE_TABLES) if truth is None else sources.tables(name, truth.joined())):
                cs.write_table(table.path, table.rows, units=table.units, description=table.description)
                stored.table(table.path, table.rows)


#: The tables whose rows a run's summary reads (its frames and PAUSE frames, its messages sent and lost).
SUMMARY_TABLES = ("truth/probe/frames", "truth/packets")


@dataclass(frozen=True)
class Stored:
    """What :func:`simulate` stored in its capture set, noted as it stored it (so that a summary need not read
    the file back): each source's samples, mode and duration (us); how many rows each table has, by path, and the
    rows of those the summary reads (:data:`SUMMARY_TABLES`; the others, a long run's transactions among them,
    are not kept); how many rows each of the results group's tables has, by name."""

    sources: dict[str, dict[str, Any]] = field(default_factory=dict)
    rows: dict[str, int] = field(default_factory=dict)
    tables: dict[str, np.ndarray] = field(default_factory=dict)
    results: dict[str, int] = field(default_factory=dict)

    def table(self, path: str, rows: np.ndarray) -> None:
        """Note table ``path``, stored with ``rows``."""
        self.rows[path] = len(rows)
        if path in SUMMARY_TABLES:
            self.tables[path] = rows


def _transaction_spans_ps(bus: BusRecord) -> tuple[np.ndarray, np.ndarray]:
    """Start and end (ps, the clock after the last busy one) of every transaction on ``bus``."""
    width = bus.profile.width_bits
    start = np.array([t.start_clk for t in bus.transactions], dtype=np.int64)
    end = start + np.array([pci_bus.busy_clocks(t, width) for t in bus.transactions], dtype=np.int64)
    return _times_of(bus.clock, start), _times_of(bus.clock, end)


def quiet_instant_ps(spans: Sequence[tuple[np.ndarray, np.ndarray]], t_ps: int, margin_ps: int) -> int:
    """The first instant at or after ``t_ps`` at least ``margin_ps`` after the end of every one of ``spans``
    (starts, ends) begun before it: where an instrument can stop without cutting a transaction or a frame."""
    moved = True
    while moved:
        moved = False
        for start, stop in spans:
            end = stop + margin_ps
            inside = (start < t_ps) & (end > t_ps)
            if inside.any():
                t_ps, moved = int(end[inside].max()), True
    return t_ps


def recorded_part(run: RigRun, messages: int, link_rate_bps: float = application.LINK_RATE_BPS) -> RigRun:
    """What instruments that stop after the first ``messages`` exchanges recorded of ``run`` (all of it for 0).

    The recording ends :data:`TAIL_US` after the last of those exchanges
    (its response received, or its datagram received or sent), or where the
    next message's application sends it if that comes first (but not before
    the last exchange has ended: a stream's backlog may still be in flight),
    at the first instant no transaction and no frame is in progress;
    everything that started before stays, everything after goes, and an
    interrupt still pending stays asserted to the end.
    """
    packets = np.array(run.packets, dtype=PACKET_DTYPE)
    first = np.sort(packets["seq"][np.isin(packets["kind"], (b"stream", b"request"))])
    if messages <= 0 or messages >= first.size:
        return run
    mine = packets[np.isin(packets["seq"], first[:messages])]
    last = int(max(mine["t_app_send_ps"].max(), mine["t_app_recv_ps"].max()))
    following = int(packets["t_app_send_ps"][packets["seq"] == first[messages]].min())
    stop = max(last, min(last + round(TAIL_US * 1e6), following))
    spans = [_transaction_spans_ps(b) for b in run.buses.values()]
    for frames in (run.probe_tx, run.probe_rx):
        start = run.probe_phase_ps + np.array([clk for clk, _ in frames], dtype=np.int64) * GMII_PERIOD_PS
        on_wire = np.array([round(frame_time_on_wire_ns(len(f.data), link_rate_bps) * 1000) for _, f in frames],
                           dtype=np.int64)
        spans.append((start, start + on_wire))
    end = quiet_instant_ps(spans, stop, STOP_MARGIN_NS * 1000)
    buses = {}
    for name, bus in run.buses.items():
        keep = [bus.time_of(t.start_clk) < end for t in bus.transactions]
        clk = bus.clock_at_or_after(end)
        kept = [t for t, k in zip(bus.transactions, keep) if k]
        buses[name] = replace(bus, transactions=kept, wide=[i for i, t in enumerate(kept) if t.wide],
                              purposes=[p for p, k in zip(bus.purposes, keep) if k],
                              interrupts=[[a, b if 0 <= b < clk else -1] for a, b in bus.interrupts if a < clk])

    probe = run.probe_clock

    def before(frames: list) -> list:
        return [(clk, f) for clk, f in frames if probe.time_of(clk) < end]

    return replace(run, buses=buses, probe_tx=before(run.probe_tx), probe_rx=before(run.probe_rx),
                   interrupts=[(h, a, d if 0 <= d < end else -1, rx, tx)
                               for h, a, d, rx, tx in run.interrupts if a < end], end_ps=end)


def _packets_table(run: RigRun) -> np.ndarray:
    rows = np.array(run.packets, dtype=PACKET_DTYPE)
    for col in ("t_app_send_ps", "t_wire_start_ps", "t_app_recv_ps"):
        known = rows[col] >= 0
        rows[col][known] -= run.trigger_ps
    return rows


def simulate(scenario: Scenario, bus: BusProfile, nic: NicProfile, host: HostProfile, out: str | os.PathLike[str],
             recording: Recording = Recording(), progress: Progress | None = None, *,
             settings: Mapping[str, Any] | None = None, argv: Sequence[str] | None = None,
             workers: int | None = None, block_clocks: int = BLOCK_CLOCKS, overwrite: bool = True,
             recv_host: HostProfile | None = None, recv_bus: BusProfile | None = None) -> tuple[RigRun, Stored]:
    """Simulate ``scenario`` and write the capture set ``out`` atomically; return the model's run and what was
    stored. ``host`` and ``bus`` are both hosts' unless ``recv_host`` and ``recv_bus`` give host B's.

    ``settings`` (what the command line asked, beyond the scenario) and ``argv``
    go into the results' root attributes (``docs/formats.md``). ``workers``:
    processes rendering the sources (default: one per usable CPU; 1: all in
    this one, after the model; :class:`_Renderer`). ``block_clocks``: clocks
    rendered and stored at a time (a power of two; chunks are at most that
    long). The capture set is the same whatever the two. Without ``overwrite`` an existing ``out`` is refused
    before anything runs (:meth:`CaptureSet.create`).
    """
    with CaptureSet.create(out, notes=f"simulated {scenario.kind} scenario, {nic.name} on {bus.name}",
                           overwrite=overwrite) as cs:
        rig = Rig(scenario, bus, nic, host, recv_host=recv_host, recv_bus=recv_bus)
        sources = partial(_Sources, nic=nic, hosts=rig.hosts, recording=recording, block_clocks=block_clocks)
        with _Renderer(rig, sources, recording, _workers(workers), progress) as renderer:
            run = rig.run(checkpoint=renderer.checkpoints, every_ps=CHECKPOINT_PS)
            recorded = recorded_part(run, recording.messages)
            renderer.finish(recorded, {_MEASURED: partial(application.measure, run, scenario)})
            stored = Stored()
            renderer.store(cs, stored)
            _write_run(cs, run, recorded, renderer.job(_MEASURED), scenario, rig, recording, settings, argv, stored)
    return run, stored


def _write_run(cs: CaptureSet, run: RigRun, recorded: RigRun, measured: application.Measured, scenario: Scenario,
               rig: Rig, recording: Recording, settings: Mapping[str, Any] | None, argv: Sequence[str] | None,
               stored: Stored) -> None:
    """The run's tables beside the sources': messages, interrupts, the simulation's settings (each host's NIC as
    its driver set it up), the applications' results (``measured``); noted in ``stored``."""
    host, recv_host = rig.hosts
    nic, recv_nic = rig.nics
    send_bus, recv_bus = run.buses["send_pci"].profile, run.buses["recv_pci"].profile
    packets = _packets_table(run)
    stored.table("truth/packets", packets)
    cs.write_table("truth/packets", packets,
                   units={"t_app_send_ps": "ps", "t_wire_start_ps": "ps", "t_app_recv_ps": "ps",
                          "size_bytes": "byte"},
                   description="every UDP message the applications sent; -1 = never (lost)")
    irq = np.array(recorded.interrupts, dtype=INTERRUPT_DTYPE)
    for col in ("t_assert_ps", "t_deassert_ps"):
        irq[col][irq[col] >= 0] -= run.trigger_ps
    cs.write_table("truth/interrupts", irq, units={"t_assert_ps": "ps", "t_deassert_ps": "ps"},
                   description="interrupts of both hosts with the frames each service handled")
    stored.table("truth/interrupts", irq)
    cs.attrs["simulation"] = json.dumps({
        "scenario": asdict(scenario), "bus": asdict(send_bus), "nic": asdict(nic),
        "host": asdict(host), "recording": asdict(recording), "counters": run.counters,
        **({"recv_bus": asdict(recv_bus)} if recv_bus != send_bus else {}),
        **({"recv_nic": asdict(recv_nic), "recv_host": asdict(recv_host)} if recv_host is not host else {}),
    }, sort_keys=True)
    rf = cs.nested(ResultsFile, RESULTS_GROUP, create=True,
                   notes=f"the applications' measurements of this simulated {scenario.kind} run")
    application.write_results(
        rf, measured, scenario, settings=application.settings_of(scenario, **(settings or {})),
        argv=list(sys.argv if argv is None else argv),
        simulation={"nic": nic.name, "bus": send_bus.name, "host": host.name,
                    **({"recv_bus": recv_bus.name} if recv_bus.name != send_bus.name else {}),
                    **({"recv_host": recv_host.name} if recv_host is not host else {}),
                    "timeline": {"trigger_ns": run.trigger_ps / 1000,
                                 "recorded_until_ns": recorded.end_ps / 1000}})
    stored.results.update((n, rf.table_info(n)["rows"]) for n in rf.table_names())
