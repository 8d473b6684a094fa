"""One acquisition with several instruments into one capture set, keeping whatever arrives.

The order, and what a failure at each step leaves:

1. identify and configure every instrument (wrong ``*IDN?``, a refused
   setting, a non-empty error queue: a clear error, nothing armed, no file);
2. arm them all, the first listed (the master, whose trigger output the
   others may wait for) last, then run the traffic while they are armed
   (optional: a function, e.g. a udpmon test);
3. wait for every trigger, noting the host time each was seen (an instrument
   that does not trigger in time is reported missing; the others go on);
4. read every record's preamble, then create the capture set with one source
   per instrument, all attributes written, and switch it to HDF5 SWMR mode:
   from here readers (the GUI) can open it and watch the sources grow;
5. stream each instrument's data into its source; a dropped connection, a
   bad block or Ctrl-C stops that instrument (Ctrl-C: all) and keeps the
   samples that arrived;
6. close, reopen, and write what happened: per source notes saying what is
   missing, the ``acquisition/instruments`` table (trigger times, offsets,
   samples expected and fetched, status), deskew offsets from a common
   reference edge, and the root ``acquisition`` attribute.

Nothing fetched (no trigger anywhere, or Ctrl-C before any data): no file.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from nicrig.acquisition.capture import CaptureSet, SourceSpec
from nicrig.acquisition.instruments import deskew
from nicrig.acquisition.instruments.driver import (
    Instrument,
    InstrumentError,
    RecordInfo,
    Settings,
)
from nicrig.acquisition.instruments.probemap import PodAssembler, source_roles

from nicrig.atomic import refuse_existing
from nicrig.errors import NicrigError

#: Seconds between polls of an armed instrument.
POLL_S = 0.02
#: Width of the text columns of the acquisition/instruments table.
TEXT = 96

STATUS_DTYPE = [("source", "S32"), ("model", "S32"), ("resource", f"S{TEXT}"), ("status", "S16"),
                ("trigger_host_ns", "<i8"), ("offset_ps", "<i8"), ("samplerate_hz", "<f8"),
                ("samples_expected", "<i8"), ("samples_fetched", "<i8"), ("error", f"S{TEXT}")]


@dataclass
class Member:
    """One instrument of the set and everything that happens to it."""

    instrument: Instrument
    settings: Settings
    offset_ps: int = 0
    bus: dict[str, Any] = field(default_factory=dict)
    status: str = "configured"
    trigger_host_ns: int = -1
    info: RecordInfo | None = None
    fetched: int = 0
    pods_received: dict[int, int] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.instrument.name

    @property
    def complete(self) -> bool:
        return self.status == "complete"

    def missing(self) -> str | None:
        """What this source lacks, in words (None when complete)."""
        if self.complete:
            return None
        if self.info is None:
            return f"{self.name}: nothing fetched ({self.status}: {'; '.join(self.errors) or 'no record'})"
        lacking = ", ".join(f"pod {p} has {n:,}" for p, n in sorted(self.pods_received.items())
                            if n < self.info.points)
        return (f"{self.name}: {self.fetched:,} of {self.info.points:,} samples ({self.status}"
                + (f"; {lacking}" if lacking else "") + (f": {'; '.join(self.errors)}" if self.errors else "") + ")")


@dataclass
class Outcome:
    path: Path | None
    members: list[Member]
    interrupted: bool = False
    traffic: dict[str, Any] | None = None
    deskew: dict[str, Any] | None = None

    @property
    def complete(self) -> bool:
        return not self.interrupted and all(m.complete for m in self.members)

    def missing(self) -> list[str]:
        return [text for m in self.members if (text := m.missing())]


def _safe(fn: Callable[[], Any]) -> None:
    try:
        fn()
    except (NicrigError, OSError):
        pass


def prepare(members: Sequence[Member]) -> None:
    """Identify and configure every instrument; the first failure closes them all and is raised."""
    try:
        for m in members:
            m.instrument.identify()
            m.instrument.configure(m.settings)
            m.notes += [f"errors left in its queue before this run (cleared): {e}"
                        for e in getattr(m.instrument, "stale_errors", [])]
    except BaseException:
        for m in members:
            _safe(m.instrument.close)
        raise


def _wait(members: Sequence[Member], timeout_s: float, say: Callable[[str], None]) -> None:
    """Poll the armed instruments until each is done, fails, or the time is up."""
    deadline = time.monotonic() + timeout_s
    waiting = [m for m in members if m.status == "armed"]
    while waiting:
        for m in list(waiting):
            try:
                finished = m.instrument.done()
            except NicrigError as exc:
                m.status, finished = "failed", False
                m.errors.append(f"while waiting for the trigger: {exc}")
                waiting.remove(m)
                continue
            if finished:
                m.status, m.trigger_host_ns = "triggered", time.time_ns()
                waiting.remove(m)
                say(f"{m.name}: triggered")
        if waiting and time.monotonic() > deadline:
            for m in waiting:
                m.status = "no trigger"
                m.errors.append(f"did not trigger within {timeout_s:g} s")
            return
        if waiting:
            time.sleep(POLL_S)


def _spec(m: Member) -> SourceSpec:
    pm = m.settings.probe_map
    roles, bus = source_roles(pm)
    info = m.info
    assert info is not None
    instrument = m.instrument.describe() | {
        "preambles": info.preambles, "probe_map": pm.describe(),
        "settings": {"sample_rate_hz": m.settings.sample_rate_hz, "record_length": m.settings.record_length,
                     "threshold_v": m.settings.threshold_v,
                     "trigger": {"signal": m.settings.trigger.signal or "external",
                                 "slope": m.settings.trigger.slope, "position": m.settings.trigger.position}},
    }
    return SourceSpec(name=m.name, channels=pm.channels, mode="timing", samplerate_hz=info.sample_rate_hz,
                      trigger_sample=info.trigger_sample, offset_ps=m.offset_ps, bus=bus | m.bus, roles=roles,
                      instrument=instrument, notes="", samples_expected=info.points)


def _fetch(cs: CaptureSet, m: Member, progress: Callable[[str, int, int], None] | None) -> None:
    writer = cs.writer(m.name)
    pm = m.settings.probe_map
    assembler = PodAssembler(pm, writer.append)
    total = m.info.points * len(pm.pods)  # type: ignore[union-attr]
    done = 0

    def step(n: int) -> None:
        nonlocal done
        done += n
        if progress:
            progress(m.name, done, total)

    m.status = "fetching"
    try:
        m.instrument.fetch(assembler, step)
        m.status = "fetched"
    except NicrigError as exc:
        m.status = "partial"
        m.errors.append(str(exc))
    except KeyboardInterrupt:
        m.status = "interrupted"
        raise
    finally:
        m.pods_received = assembler.flush_partial()
        m.fetched = writer.num_samples
    if m.status != "fetched":
        return  # after a broken transfer the connection's state is unknown: ask it nothing more
    if m.fetched != m.info.points:  # type: ignore[union-attr]
        m.status = "partial"
        m.errors.append(f"{m.fetched} samples arrived, the preamble announced {m.info.points}")  # type: ignore[union-attr]
        return
    try:
        m.instrument.check_errors("while sending its data")
    except NicrigError as exc:
        m.errors.append(str(exc))
    # errors reported while acquiring or sending: the record is kept, but not called complete
    m.status = "suspect" if m.errors else "complete"


def run(members: Sequence[Member], out: str | Path, *, timeout_s: float = 30.0,
        while_armed: Callable[[], dict[str, Any]] | None = None, deskew_signal: str | None = None,
        notes: str = "", settings: dict[str, Any] | None = None, say: Callable[[str], None] = lambda s: None,
        progress: Callable[[str, int, int], None] | None = None, overwrite: bool = False) -> Outcome:
    """Arm, trigger, fetch ``members`` (identified and configured by :func:`prepare`) into ``out``."""
    out = Path(out)
    if not overwrite:
        refuse_existing(out)
    outcome = Outcome(path=None, members=list(members))
    try:
        return _run(outcome, out, timeout_s, while_armed, deskew_signal, notes, settings or {}, say, progress,
                    overwrite)
    finally:
        for m in members:
            _safe(m.instrument.close)


def _run(outcome: Outcome, out: Path, timeout_s: float, while_armed: Callable[[], dict[str, Any]] | None,
         deskew_signal: str | None, notes: str, settings: dict[str, Any], say: Callable[[str], None],
         progress: Callable[[str, int, int], None] | None, overwrite: bool) -> Outcome:
    members = outcome.members
    for m in reversed(members):  # the first listed is the master: armed last, when the others already wait
        m.instrument.arm()
        m.status = "armed"
    say("armed: " + ", ".join(m.name for m in members))
    if while_armed is not None:
        try:
            outcome.traffic = while_armed()
        except NicrigError as exc:
            outcome.traffic = {"error": str(exc)}
            say(f"traffic failed: {exc}")
    try:
        _wait(members, timeout_s, say)
    except KeyboardInterrupt:
        raise KeyboardInterrupt("interrupted while waiting for the triggers: nothing fetched, nothing written") from None
    for m in members:
        if m.status != "triggered":
            continue
        try:
            m.instrument.check_errors("while acquiring")
        except NicrigError as exc:
            m.errors.append(str(exc))
            m.notes.append("the instrument reported errors while acquiring: its record is kept but suspect")
        try:
            m.info = m.instrument.record_info()
            m.status = "described"
        except NicrigError as exc:
            m.status = "failed"
            m.errors.append(f"reading its preamble: {exc}")
    ready = [m for m in members if m.info is not None]
    if not ready:
        raise InstrumentError("no instrument delivered a record, nothing written: "
                              + "; ".join(text for m in members if (text := m.missing())))
    cs = CaptureSet.create(out, notes=notes, atomic=False, overwrite=overwrite)
    outcome.path = out
    try:
        for m in ready:
            cs.add_source(_spec(m))
        cs.start_swmr()
        say(f"writing {out} (SWMR: open it while it grows)")
        for m in ready:
            _fetch(cs, m, progress)
    except KeyboardInterrupt:
        outcome.interrupted = True
        for m in ready:
            if m.status == "described":
                m.status = "interrupted"
    finally:
        cs.close()
    for m in members:
        if m.status in ("fetching", "described"):
            m.status = "interrupted"
    _finish(outcome, out, deskew_signal, settings)
    if outcome.interrupted:
        raise KeyboardInterrupt(f"interrupted: {out} keeps what was fetched")
    return outcome


def _finish(outcome: Outcome, out: Path, deskew_signal: str | None, settings: dict[str, Any]) -> None:
    """Write what happened into the closed file: notes, offsets, the acquisition table and attribute."""
    with CaptureSet.amend(out) as cs:  # a copy, replacing the capture only once complete
        if deskew_signal is not None:
            try:
                outcome.deskew = deskew.apply(cs, deskew_signal, prefer=[m.name for m in outcome.members])
            except NicrigError as exc:
                outcome.deskew = {"error": str(exc)}
        offsets = {n: cs.source(n).offset_ps for n in cs.source_names}
        for m in outcome.members:
            if m.name in offsets:
                w = cs.writer(m.name)
                w.set_notes("; ".join(m.notes + ([f"INCOMPLETE: {m.missing()}"] if not m.complete else [])))
        rows = np.zeros(len(outcome.members), dtype=STATUS_DTYPE)
        for i, m in enumerate(outcome.members):
            rows[i] = (m.name.encode(), m.instrument.model.encode(), m.instrument.resource.encode()[:TEXT],
                       m.status.encode(), m.trigger_host_ns, offsets.get(m.name, m.offset_ps),
                       m.info.sample_rate_hz if m.info else 0.0, m.info.points if m.info else 0, m.fetched,
                       "; ".join(m.errors).encode("utf-8", "replace")[:TEXT])
        cs.write_table("acquisition/instruments", rows, units={"trigger_host_ns": "ns", "offset_ps": "ps",
                                                               "samplerate_hz": "Hz"},
                       description="one row per instrument: status, trigger time seen by the host "
                                   "(Unix ns, -1 = none), offset on the common timeline, samples")
        missing = outcome.missing()
        if outcome.interrupted:
            missing.insert(0, "interrupted (Ctrl-C)")
        if missing:
            cs.attrs["notes"] = (cs.notes + "; " if cs.notes else "") + "INCOMPLETE: " + "; ".join(missing)
        cs.attrs["acquisition"] = json.dumps({
            "settings": settings, "complete": outcome.complete, "missing": missing, "traffic": outcome.traffic,
            "deskew": outcome.deskew,
            "instruments": [{"source": m.name, "status": m.status, "errors": m.errors, "notes": m.notes,
                             "trigger_host_ns": m.trigger_host_ns, "samples_fetched": m.fetched,
                             "samples_expected": m.info.points if m.info else None,
                             "pods_received": {str(k): v for k, v in m.pods_received.items()}}
                            for m in outcome.members],
        }, sort_keys=True, default=str)
