"""Host traces: the spooled ring-buffer pages decoded into event tables, and their place in nicrig files.

A host trace is stored under ``host_trace/<host>/`` of a capture set or a
results file (``docs/formats.md``, "Host traces"):

* ``events``: one row per kernel event, in time order (``EVENT_DTYPE``);
* ``losses``: the kernel's ring-buffer counters per CPU, the sub-buffers
  libtraceevent found flagged after a loss or could not read, and the records
  of events the stored formats do not describe (``LOSSES_DTYPE``);
* ``raw`` and ``raw_cpu``: the recorded sub-buffers as the kernel wrote them,
  with the header_page and event formats in attributes, so the tables can be
  decoded again by any libtraceevent reader (raw data is kept).

Attributes of the group give the trace clock, the span, the event names the
``event`` column indexes, the kernel's symbol tables (drop reasons, softirq
vectors) and the clock offset to the run's reference host with its uncertainty.
"""

from __future__ import annotations

import json
import socket
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from nicrig.acquisition.hostprobe import tracefs
from nicrig.acquisition.hostprobe.recorder import SPOOL_HEADER, Recording, RecordSpec, RecordSummary
from nicrig.errors import FormatError
from nicrig.h5file import NicrigFile, to_json

GROUP = "host_trace"
#: Integer columns and the trace-event fields that fill them, first match wins (-1: the event has none).
INT_COLUMNS: dict[str, tuple[str, ...]] = {
    "irq": ("irq",), "vector": ("vec",), "work": ("work",), "budget": ("budget",), "napi": ("napi",),
    "skbaddr": ("skbaddr",), "sk": ("sk", "skaddr"), "len": ("len",), "reason": ("reason",), "protocol": ("protocol",),
    "syscall": ("id",), "ret": ("ret", "rc"),
}
#: The string column: a device or handler name.
STRING_FIELDS = ("name", "dev_name")
DEVICE_BYTES = 24
EVENT_DTYPE = np.dtype([
    ("time_ns", "<i8"), ("cpu", "<i2"), ("pid", "<i4"), ("event", "<i2"), ("irq", "<i4"), ("vector", "<i2"),
    ("work", "<i4"), ("budget", "<i4"), ("napi", "<u8"), ("device", f"S{DEVICE_BYTES}"), ("skbaddr", "<u8"),
    ("sk", "<u8"), ("len", "<i4"), ("reason", "<i4"), ("protocol", "<i4"), ("syscall", "<i4"), ("ret", "<i8"),
])
EVENT_UNITS = {"time_ns": "ns, trace clock (CLOCK_MONOTONIC of this host)", "len": "byte"}
LOSSES_DTYPE = np.dtype([
    ("cpu", "<i2"), ("entries", "<i8"), ("overrun", "<i8"), ("commit_overrun", "<i8"), ("dropped_events", "<i8"),
    ("read_events", "<i8"), ("bytes", "<i8"), ("flagged_subbuffers", "<i8"), ("subbuffers", "<i8"),
    ("unreadable_subbuffers", "<i8"), ("unknown_records", "<i8"),
])


@dataclass
class HostTrace:
    """One host's decoded trace and what is known about it."""

    host: str
    events: np.ndarray
    event_names: list[str]
    losses: np.ndarray
    clock: str
    start_ns: int
    end_ns: int
    symbols: dict[str, dict[int, str]] = field(default_factory=dict)
    pids: list[int] = field(default_factory=list)
    truncated: str = ""
    hostname: str = ""
    clock_offset_ns: float = 0.0
    clock_offset_uncertainty_ns: float = 0.0
    clock_reference: str = ""
    subbuf_size: int = 0
    raw: np.ndarray | None = None
    raw_cpu: np.ndarray | None = None
    formats: dict[str, str] = field(default_factory=dict)
    header_page: str = ""

    def code(self, event: str) -> int:
        """The ``event`` column's value for ``system:name`` (-1 when not recorded)."""
        return self.event_names.index(event) if event in self.event_names else -1

    def of(self, event: str) -> np.ndarray:
        """The rows of one event."""
        return self.events[self.events["event"] == self.code(event)]

    @property
    def lost(self) -> int:
        """Events the kernel dropped or overwrote, over all CPUs."""
        return int(self.losses["dropped_events"].sum() + self.losses["overrun"].sum())

    @property
    def unreadable_subbuffers(self) -> int:
        """Recorded sub-buffers libtraceevent could not read: their events are lost too, in unknown number."""
        return int(self.losses["unreadable_subbuffers"].sum())

    @property
    def unknown_records(self) -> int:
        """Records of events the stored formats do not describe: present in the trace, not decoded."""
        return int(self.losses["unknown_records"].sum())


def read_formats(base: Path, events: tuple[str, ...]) -> tuple[str, dict[str, str]]:
    """The ring buffer's header_page and each event's format, as the kernel describes them."""
    header = (base / "events" / "header_page").read_text()
    formats = {e: (base / "events" / e.replace(":", "/") / "format").read_text() for e in events}
    return header, formats


def header_page_size(header_page: str) -> int:
    """Bytes of the page the kernel's ``header_page`` describes: the end of its ``data`` field (offset + size)."""
    for line in header_page.splitlines():
        parts = dict(p.strip().split(":", 1) for p in line.split(";") if ":" in p)
        if parts.get("field", "").split()[-1:] == ["data"]:
            return int(parts["offset"]) + int(parts["size"])
    raise FormatError("header_page has no data field")


def check_subbuf_size(subbuf: int, header_page: str) -> None:
    """Refuse a sub-buffer size the kernel could not have written: not a power of two, or smaller than the
    page its header_page describes (sub-buffers are that page or a power-of-two multiple of it)."""
    page = header_page_size(header_page)
    if subbuf < page or subbuf & (subbuf - 1):
        raise FormatError(f"sub-buffer size of {subbuf} bytes does not fit the trace's header_page (a page of "
                          f"{page} bytes, or a power-of-two multiple of it)")


def read_spool(spool: Path, subbuf: int) -> tuple[np.ndarray, np.ndarray]:
    """The guardian's spool as (sub-buffers uint8 [n, subbuf], their CPU int16 [n])."""
    record = SPOOL_HEADER.size + subbuf
    data = np.fromfile(spool, dtype=np.uint8)
    if data.size % record:
        raise FormatError(f"{spool}: {data.size} bytes is not whole spool records of {record} bytes")
    rows = data.reshape(-1, record)
    cpu = rows[:, :SPOOL_HEADER.size].copy().view("<u4")[:, 0].astype(np.int16)
    return np.ascontiguousarray(rows[:, SPOOL_HEADER.size:]), cpu


def decode(raw: np.ndarray, raw_cpu: np.ndarray, header_page: str, formats: dict[str, str],
           stats: dict[int, dict[str, int]],
           subbuf: int) -> tuple[np.ndarray, list[str], np.ndarray, dict[str, dict[int, str]]]:
    """Sub-buffers of ``subbuf`` bytes (the size recorded with the trace) to (events table in time order, event
    names, losses table, symbol tables) with libtraceevent."""
    from nicrig.acquisition.hostprobe._traceevent import Parser

    check_subbuf_size(subbuf, header_page)
    if raw.ndim != 2 or raw.shape[1] != subbuf:
        raise FormatError(f"raw sub-buffers of shape {raw.shape} are not rows of the trace's {subbuf} bytes")
    parser = Parser(header_page.encode(), [(e.split(":")[0], text.encode()) for e, text in formats.items()],
                    [list(names) for names in INT_COLUMNS.values()], list(STRING_FIELDS), subbuf)
    by_id = {i: f"{s}:{n}" for i, s, n in parser.events()}
    names = sorted(formats)
    code_of = np.full(max(by_id, default=0) + 1, -1, dtype=np.int16)
    for i, name in by_id.items():
        code_of[i] = names.index(name)
    parts, losses = [], []
    for cpu in sorted(set(int(c) for c in raw_cpu) | set(stats)):
        pages = raw[raw_cpu == cpu]
        ts, ids, pids, cols, strs, missed, n_pages, unreadable, unknown = parser.parse(pages.tobytes())
        n = len(ts) // 8
        t = np.zeros(n, dtype=EVENT_DTYPE)
        t["time_ns"], t["cpu"], t["pid"] = np.frombuffer(ts, "<i8"), cpu, np.frombuffer(pids, "<i4")
        t["event"] = code_of[np.frombuffer(ids, "<i4")]
        values = np.frombuffer(cols, "<i8").reshape(n, len(INT_COLUMNS))
        for k, col in enumerate(INT_COLUMNS):
            t[col] = values[:, k].astype(EVENT_DTYPE[col]) if EVENT_DTYPE[col].kind != "u" \
                else np.where(values[:, k] == -1, 0, values[:, k]).astype(np.uint64)
        strings = np.array([s.encode()[:DEVICE_BYTES] for s in parser.strings] + [b""], dtype=f"S{DEVICE_BYTES}")
        t["device"] = strings[np.frombuffer(strs, "<i4")]  # -1 picks the trailing empty name
        parts.append(t)
        s = stats.get(cpu, {})
        losses.append((cpu, s.get("entries", 0), s.get("overrun", 0), s.get("commit_overrun", 0),
                       s.get("dropped_events", 0), s.get("read_events", 0), s.get("bytes", 0), missed, n_pages,
                       unreadable, unknown))
    events = np.concatenate(parts) if parts else np.zeros(0, EVENT_DTYPE)
    events = events[np.argsort(events["time_ns"], kind="stable")]
    symbols = {}
    ids = {name: i for i, name in by_id.items()}
    for event, fld, key in (("skb:kfree_skb", "reason", "drop_reason"), ("irq:softirq_entry", "vec", "softirq")):
        if event in ids:
            symbols[key] = parser.symbols(ids[event], fld)
    return events, names, np.array(losses, dtype=LOSSES_DTYPE), symbols


@dataclass
class RawTrace:
    """A recording before decoding: what the guardian reported, the kernel's formats, the sub-buffers."""

    summary: RecordSummary
    header_page: str
    formats: dict[str, str]
    raw: np.ndarray
    raw_cpu: np.ndarray
    pids: list[int]
    hostname: str

    def decode(self, host: str) -> HostTrace:
        s = self.summary
        events, names, losses, symbols = decode(self.raw, self.raw_cpu, self.header_page, self.formats, s.stats,
                                                s.subbuf_size)
        return HostTrace(host=host, events=events, event_names=names, losses=losses, clock=s.clock,
                         start_ns=s.start_ns, end_ns=s.end_ns, symbols=symbols, pids=self.pids,
                         truncated=s.truncated, hostname=self.hostname, subbuf_size=s.subbuf_size, raw=self.raw,
                         raw_cpu=self.raw_cpu, formats=self.formats, header_page=self.header_page)


class HostCapture:
    """Record this host's kernel events around a block: ``with HostCapture(...) as cap: ...; trace = cap.finish()``.

    Leaving the block without :meth:`finish` (an error, Ctrl-C) stops the
    recording and removes its instance; the spool lives in a temporary folder.
    """

    def __init__(self, host: str, spec: RecordSpec):
        self.host = host
        self.spec = spec
        self.pids = list(spec.pids)  # every thread whose system calls were recorded at some time
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self._recording: Recording | None = None

    def __enter__(self) -> HostCapture:
        self._tmp = tempfile.TemporaryDirectory(prefix="nicrig-trace-")
        self._recording = Recording(self.spec, Path(self._tmp.name) / "spool")
        try:
            self._recording.start()
        except BaseException:
            self._tmp.cleanup()
            raise
        return self

    @property
    def instance(self) -> str:
        """The tracefs instance recording (``nicrig-<guardian pid>``)."""
        return self._recording.instance if self._recording else ""

    def follow(self, pids: list[int]) -> None:
        """Record the system calls of these threads from now on."""
        assert self._recording is not None
        self._recording.follow(pids)
        self.pids = sorted(set(self.pids) | set(pids))

    def stop_raw(self) -> RawTrace:
        """Stop recording; the sub-buffers as recorded, with what decoding them needs."""
        assert self._recording is not None
        summary = self._recording.stop()
        header_page, formats = read_formats(tracefs.root(), self._recording.spec.events)
        raw, raw_cpu = read_spool(self._recording.spool, summary.subbuf_size)
        return RawTrace(summary=summary, header_page=header_page, formats=formats, raw=raw, raw_cpu=raw_cpu,
                        pids=self.pids, hostname=socket.gethostname())

    def finish(self) -> HostTrace:
        """Stop recording and decode what was recorded."""
        return self.stop_raw().decode(self.host)

    def __exit__(self, *exc: Any) -> None:
        if self._recording is not None:
            self._recording.abort()
        if self._tmp is not None:
            self._tmp.cleanup()


# -- storage ----------------------------------------------------------------------------------

def write(f: NicrigFile, trace: HostTrace) -> None:
    """Store a host trace in a capture set or results file under ``host_trace/<host>``."""
    prefix = f"{GROUP}/{trace.host}"
    f.write_table(f"{prefix}/events", trace.events, units=EVENT_UNITS,
                  description="kernel trace events of this host, in time order; -1 / 0 / empty where the "
                              "event has no such field",
                  attrs={"event_names": trace.event_names})
    f.write_table(f"{prefix}/losses", trace.losses,
                  description="the kernel's ring-buffer counters per CPU (per_cpu/cpuN/stats) and the "
                              "sub-buffers flagged as following lost events")
    if trace.raw is not None and trace.raw_cpu is not None:
        f.write_array(f"{prefix}/raw", trace.raw)
        f.write_array(f"{prefix}/raw_cpu", trace.raw_cpu)
    grp = f.group(prefix)
    assert grp is not None
    attrs = {"clock": trace.clock, "start_ns": trace.start_ns, "end_ns": trace.end_ns,
             "symbols": to_json({k: {str(v): s for v, s in t.items()} for k, t in trace.symbols.items()}),
             "pids": to_json(trace.pids), "truncated": trace.truncated, "hostname": trace.hostname,
             "clock_offset_ns": float(trace.clock_offset_ns),
             "clock_offset_uncertainty_ns": float(trace.clock_offset_uncertainty_ns),
             "clock_reference": trace.clock_reference, "subbuf_size": trace.subbuf_size,
             "formats": to_json(trace.formats), "header_page": trace.header_page}
    for k, v in attrs.items():
        grp.attrs[k] = v


def hosts(f: NicrigFile) -> list[str]:
    """The hosts a file holds traces of."""
    grp = f.group(GROUP)
    return sorted(grp) if grp is not None else []


def read(f: NicrigFile, host: str, *, raw: bool = False) -> HostTrace:
    """One host's trace from a file (the raw sub-buffers only when asked)."""
    grp = f.group(f"{GROUP}/{host}")
    if grp is None:
        raise FormatError(f"{f.path}: no host trace {host!r} (hosts: {', '.join(hosts(f)) or 'none'})")
    try:
        a = grp.attrs
        events = f.read_table(f"{GROUP}/{host}/events")
        names = json.loads(f.table_attrs(f"{GROUP}/{host}/events")["event_names"])
        symbols = {k: {int(v): s for v, s in t.items()} for k, t in json.loads(a["symbols"]).items()}
        return HostTrace(
            host=host, events=_in_layout(events, EVENT_DTYPE), event_names=names, losses=_in_layout(f.read_table(f"{GROUP}/{host}/losses"), LOSSES_DTYPE),
            clock=str(a["clock"]), start_ns=int(a["start_ns"]), end_ns=int(a["end_ns"]), symbols=symbols,
            pids=json.loads(a["pids"]), truncated=str(a["truncated"]), hostname=str(a["hostname"]),
            clock_offset_ns=float(a["clock_offset_ns"]),
            clock_offset_uncertainty_ns=float(a["clock_offset_uncertainty_ns"]),
            clock_reference=str(a["clock_reference"]), subbuf_size=int(a["subbuf_size"]),
            raw=grp["raw"][()] if raw and "raw" in grp else None,
            raw_cpu=grp["raw_cpu"][()] if raw and "raw_cpu" in grp else None,
            formats=json.loads(a["formats"]), header_page=str(a["header_page"]))
    except (KeyError, ValueError, TypeError) as exc:
        raise FormatError(f"{f.path}: host trace {host!r} is malformed: {exc}") from None


def _in_layout(stored: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """A stored table in today's layout: columns a file written before them lacks are 0 (a count of none, or
    no address)."""
    if stored.dtype == dtype:
        return stored
    out = np.zeros(len(stored), dtype)
    for name in dtype.names or ():
        if name in (stored.dtype.names or ()):
            out[name] = stored[name]
    return out


def describe(trace: HostTrace) -> dict[str, Any]:
    """A summary for ``--json`` and ``nicrig info``: events per kind, span, losses."""
    counts = np.bincount(trace.events["event"][trace.events["event"] >= 0], minlength=len(trace.event_names))
    return {"host": trace.host, "hostname": trace.hostname, "clock": trace.clock,
            "span_s": (trace.end_ns - trace.start_ns) / 1e9, "events": int(len(trace.events)),
            "by_event": {n: int(c) for n, c in zip(trace.event_names, counts)},
            "lost_events": trace.lost, "flagged_subbuffers": int(trace.losses["flagged_subbuffers"].sum()),
            "unreadable_subbuffers": trace.unreadable_subbuffers, "unknown_records": trace.unknown_records,
            "truncated": trace.truncated, "clock_offset_ns": trace.clock_offset_ns,
            "clock_offset_uncertainty_ns": trace.clock_offset_uncertainty_ns}
