"""Recording kernel trace events in a tracefs instance of our own, owned by a guardian process.

The instance is created, configured, read and removed by a small child process
(``python -m nicrig.acquisition.hostprobe.recorder``), never by the process
being measured:

* it is the guardian: it holds the instance for as long as its parent keeps
  the pipe on its standard input open, so when the parent ends in any way
  (return, Ctrl-C, SIGTERM, SIGKILL, a crash) the pipe closes and the child
  stops tracing and removes the instance; the instance is named after the
  child's pid so that, should the child itself be killed, the next recording
  sweeps it away (:func:`nicrig.acquisition.hostprobe.tracefs.sweep_stale`);
* it drains the per-CPU ring buffers (``per_cpu/cpuN/trace_pipe_raw``, whole
  sub-buffers in the kernel's binary format) into a spool file while the
  measurement runs, in its own process, so the measured program's interpreter
  lock is not contended;
* it stores the kernel's own loss counters (``per_cpu/cpuN/stats``) at the end.

The ring buffer runs on the ``mono`` trace clock: CLOCK_MONOTONIC in
nanoseconds, the clock of the udpmon engine's timestamps (Documentation/
trace/ftrace.rst, "trace_clock"), so host events and packets share one time
base without conversion. The buffer is not overwritten when full
(``options/overwrite`` 0): the kernel then drops new events and counts them
("dropped events"), and a sub-buffer that follows a loss is flagged; both are
kept, so a loss is never silent.

The parent side is :class:`Recording`; the spool is parsed by
:mod:`nicrig.acquisition.hostprobe.events`.
"""

from __future__ import annotations

import json
import os
import signal
import struct
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from nicrig.acquisition.hostprobe import tracefs
from nicrig.errors import NicrigError, UsageError
from nicrig.readiness import readable

#: The events recorded when none are named (the host's share of a UDP exchange).
DEFAULT_EVENTS = (
    "irq:irq_handler_entry", "irq:irq_handler_exit", "irq:softirq_raise", "irq:softirq_entry",
    "irq:softirq_exit", "napi:napi_poll", "net:net_dev_queue", "net:net_dev_xmit", "net:netif_rx",
    "net:netif_receive_skb", "net:napi_gro_receive_entry", "skb:kfree_skb", "skb:consume_skb",
    "sock:sk_data_ready", "sock:sock_send_length", "sock:sock_recv_length",
    "raw_syscalls:sys_enter", "raw_syscalls:sys_exit",
)
#: Events that would record every process's activity: kept to the measured program's threads.
PER_PROCESS = ("raw_syscalls:sys_enter", "raw_syscalls:sys_exit", "sock:sock_send_length", "sock:sock_recv_length")
#: Events of newer kernels (sock_*_length: Linux 6.4, sk_data_ready: 6.6), left out where the kernel has none:
#: without them a datagram's socket is unknown, and the report says its path cannot be followed.
WHERE_AVAILABLE = ("sock:sk_data_ready", "sock:sock_send_length", "sock:sock_recv_length")
OPTIONAL = ("sched:sched_switch",)
#: Spool record header: CPU number, then one sub-buffer.
SPOOL_HEADER = struct.Struct("<I")


@dataclass(frozen=True)
class RecordSpec:
    """What to record: events (``system:name``), whose system calls, buffer and bounds.

    ``buffer_kb``: ring buffer per CPU (KiB); ``max_bytes``: spool size at which
    recording stops (the summary says so); ``max_seconds``: the longest the
    instance may live, whatever the parent does.
    """

    events: tuple[str, ...] = DEFAULT_EVENTS
    pids: tuple[int, ...] = ()
    buffer_kb: int = 4096
    max_bytes: int = 512 << 20
    max_seconds: float = 3600.0

    def for_kernel(self, available: set[str]) -> RecordSpec:
        """This spec without the events of newer kernels that this one lacks (:data:`WHERE_AVAILABLE`)."""
        return replace(self, events=tuple(e for e in self.events if e in available or e not in WHERE_AVAILABLE))

    def validate(self, available: set[str]) -> None:
        unknown = [e for e in self.events if e not in available]
        if unknown:
            raise UsageError(f"this kernel cannot trace {', '.join(unknown)} "
                             f"(see {tracefs.MOUNTS[0]}/available_events)")
        if any(e in PER_PROCESS for e in self.events) and not self.pids:
            raise UsageError("system-call events need the pid(s) whose calls to record")
        if not 64 <= self.buffer_kb <= 1 << 20:
            raise UsageError(f"buffer of {self.buffer_kb} KiB per CPU: use 64 to 1048576")
        if self.max_bytes <= 0 or self.max_seconds <= 0:
            raise UsageError("recording bounds must be positive")


@dataclass
class RecordSummary:
    """What the guardian reports after removing its instance."""

    instance: str
    clock: str
    subbuf_size: int
    start_ns: int
    end_ns: int
    spool_bytes: int
    stats: dict[int, dict[str, int]] = field(default_factory=dict)
    truncated: str = ""
    swept: list[str] = field(default_factory=list)


def pid_filter(pids: Sequence[int]) -> str:
    """The tracefs event filter keeping records of these threads (``common_pid`` is the thread id)."""
    return " || ".join(f"common_pid == {int(p)}" for p in pids)


def process_threads(pid: int | None = None) -> list[int]:
    """Thread ids of a process (default: this one), whose system calls a recording can follow."""
    return sorted(int(t) for t in os.listdir(f"/proc/{pid or os.getpid()}/task"))


def parse_stats(text: str) -> dict[str, int]:
    """``per_cpu/cpuN/stats`` as numbers (``entries: 12``, ``oldest event ts: 123.456``...), integer counters only."""
    out = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        value = value.strip()
        if value.isdigit():
            out[key.strip().replace(" ", "_")] = int(value)
    return out


# -- the guardian (child) -----------------------------------------------------------------

def _configure(inst: Path, spec: RecordSpec) -> None:
    (inst / "tracing_on").write_text("0")
    (inst / "trace_clock").write_text("mono")
    (inst / "buffer_size_kb").write_text(str(spec.buffer_kb))
    (inst / "options" / "overwrite").write_text("0")
    for event in spec.events:
        system, name = event.split(":", 1)
        d = inst / "events" / system / name
        if event in PER_PROCESS:
            (d / "filter").write_text(pid_filter(spec.pids))
        (d / "enable").write_text("1")


def _cpus(inst: Path) -> list[int]:
    return sorted(int(p.name[3:]) for p in (inst / "per_cpu").iterdir() if p.name[3:].isdigit())


def _drain(fds: dict[int, int], spool: Any, subbuf: int) -> int:
    """Read every whole sub-buffer the kernel has ready; returns the bytes spooled."""
    total = 0
    for cpu, fd in fds.items():
        while True:
            try:
                page = os.read(fd, subbuf)
            except BlockingIOError:
                break
            if not page:
                break
            spool.write(SPOOL_HEADER.pack(cpu) + page.ljust(subbuf, b"\0"))
            total += subbuf
    return total


def guardian_main(argv: Sequence[str]) -> int:
    """The child: ``recorder SPEC_JSON SPOOL_PATH``; says ``ready`` on stdout, stops on ``stop`` or EOF of stdin."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when to stop
    stop_requested = []
    signal.signal(signal.SIGTERM, lambda *_: stop_requested.append(True))
    spec = RecordSpec(**{k: tuple(v) if isinstance(v, list) else v for k, v in json.loads(argv[0]).items()})
    spool_path = Path(argv[1])
    try:
        base = tracefs.root()
    except NicrigError as exc:
        print(json.dumps({"error": str(exc)}), flush=True)
        return 2
    swept = tracefs.sweep_stale(base)
    inst = base / "instances" / f"{tracefs.INSTANCE_PREFIX}{os.getpid()}"
    fds: dict[int, int] = {}
    try:
        inst.mkdir()
        _configure(inst, spec)
        subbuf_file = inst / "buffer_subbuf_size_kb"
        subbuf = int(subbuf_file.read_text()) * 1024 if subbuf_file.exists() else os.sysconf("SC_PAGE_SIZE")
        fds = {cpu: os.open(inst / "per_cpu" / f"cpu{cpu}" / "trace_pipe_raw", os.O_RDONLY | os.O_NONBLOCK)
               for cpu in _cpus(inst)}
        with open(spool_path, "wb") as spool:
            start = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
            (inst / "tracing_on").write_text("1")
            print(json.dumps({"ready": inst.name, "start_ns": start}), flush=True)
            spooled, truncated, eof = 0, "", False
            while not (eof or stop_requested):
                if readable(sys.stdin, 0.05):
                    line = sys.stdin.readline()
                    eof = not line or line.strip() == "stop"
                if truncated:
                    continue
                spooled += _drain(fds, spool, subbuf)
                elapsed = (time.clock_gettime_ns(time.CLOCK_MONOTONIC) - start) / 1e9
                if spooled >= spec.max_bytes or elapsed >= spec.max_seconds:
                    (inst / "tracing_on").write_text("0")
                    truncated = (f"stopped at the size bound ({spec.max_bytes} bytes)" if spooled >= spec.max_bytes
                                 else f"stopped at the time bound ({spec.max_seconds:g} s)")
            (inst / "tracing_on").write_text("0")
            end = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
            if not truncated:
                spooled += _drain(fds, spool, subbuf)
        stats = {cpu: parse_stats((inst / "per_cpu" / f"cpu{cpu}" / "stats").read_text()) for cpu in fds}
        clock = (inst / "trace_clock").read_text().split("[")[1].split("]")[0]  # "local [mono] ...": the chosen
        summary = RecordSummary(instance=inst.name, clock=clock,
                                subbuf_size=subbuf, start_ns=start, end_ns=end, spool_bytes=spooled, stats=stats,
                                truncated=truncated, swept=swept)
        result: dict[str, Any] = {"summary": asdict(summary)}
    except OSError as exc:
        result = {"error": f"tracefs: {exc.filename or inst}: {exc.strerror or exc}"}
    finally:
        for fd in fds.values():
            os.close(fd)
        tracefs.remove_instance(inst)
    try:
        print(json.dumps(result), flush=True)
    except BrokenPipeError:
        pass  # the parent is gone: the instance is removed, which is all that mattered
    return 0 if "summary" in result else 1


# -- the parent side ------------------------------------------------------------------------

class Recording:
    """A running recording: ``start()`` returns once tracing is on, ``stop()`` returns the summary.

    Use as a context manager; leaving it in any way stops the recording and
    removes the instance (the guardian does it even if this process is killed).
    """

    def __init__(self, spec: RecordSpec, spool: Path):
        self.spec = spec
        self.spool = spool
        self._proc: subprocess.Popen[str] | None = None
        self.instance = ""
        self.start_ns = 0

    def start(self, timeout_s: float = 20.0) -> None:
        available = tracefs.available_events(tracefs.root())
        self.spec = self.spec.for_kernel(available)
        self.spec.validate(available)
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "nicrig.acquisition.hostprobe.recorder", json.dumps(asdict(self.spec)),
             str(self.spool)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, start_new_session=True)
        first = _read_message(self._proc, timeout_s)
        if "ready" not in first:
            self.abort()  # a guardian that did not answer in time must not hold this process up
            raise NicrigError(f"kernel tracing could not start: {first.get('error', first)}")
        self.instance, self.start_ns = first["ready"], int(first["start_ns"])

    def follow(self, pids: Sequence[int]) -> None:
        """Record the system calls of these threads from now on, instead of the ones before (a worker thread
        started after tracing)."""
        if self._proc is None or not any(e in PER_PROCESS for e in self.spec.events):
            return
        inst = tracefs.root() / "instances" / self.instance
        for event in self.spec.events:
            if event in PER_PROCESS:
                (inst / "events" / event.replace(":", "/") / "filter").write_text(pid_filter(pids))

    def stop(self, timeout_s: float = 60.0) -> RecordSummary:
        if self._proc is None:
            raise NicrigError("the recording was never started")
        proc, self._proc = self._proc, None
        try:
            assert proc.stdin is not None
            proc.stdin.write("stop\n")
            proc.stdin.close()
        except BrokenPipeError:
            pass
        last = _read_message(proc, timeout_s)
        _reap(proc, timeout_s)
        if "summary" not in last:
            raise NicrigError(f"kernel tracing failed: {last.get('error', last)}")
        s = last["summary"]
        s["stats"] = {int(k): v for k, v in s["stats"].items()}
        return RecordSummary(**s)

    def abort(self) -> None:
        """Stop without waiting for a summary (an error path); the guardian still removes the instance."""
        if self._proc is not None:
            proc, self._proc = self._proc, None
            try:
                assert proc.stdin is not None
                proc.stdin.close()
            except OSError:
                pass
            _reap(proc, 30.0)

    def __enter__(self) -> Recording:
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.abort()


def _reap(proc: subprocess.Popen[str], timeout_s: float) -> None:
    """Wait for the guardian to exit, killing it after ``timeout_s`` (its instance is then swept by the next
    recording, :func:`tracefs.sweep_stale`)."""
    try:
        proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _read_message(proc: subprocess.Popen[str], timeout_s: float) -> dict[str, Any]:
    """The guardian's next JSON line, or an error message when it says nothing in time."""
    assert proc.stdout is not None
    ready = readable(proc.stdout, timeout_s)
    line = proc.stdout.readline() if ready else ""
    if not line:
        return {"error": "the recorder process ended without a word" if ready else "the recorder did not answer"}
    return json.loads(line)


if __name__ == "__main__":
    sys.exit(guardian_main(sys.argv[1:]))
