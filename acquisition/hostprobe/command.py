"""``nicrig trace``: the host probe on its own.

``nicrig trace record [--events ...] [--duration S | -- COMMAND] -o FILE``
records this host's kernel events (interrupts, softirqs, NAPI polls, device
transmit and receive, socket buffer frees with drop reasons, and the system
calls of COMMAND or of ``--pid`` threads) into a capture set's
``host_trace/<host>`` (docs/host-probe.md). ``nicrig trace show FILE``
summarises the traces a capture set or results file holds, and ``nicrig trace
export FILE -o OUT`` writes its aligned timeline as a Perfetto trace.

Exit codes: 0 done (with COMMAND: the command's own exit code), 2 a problem
with the input or with permission to trace (not root), 130 interrupted
before anything was recorded.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from typing import Any

from nicrig.errors import UsageError

#: ``--events`` may name a group of the defaults instead of each event.
GROUPS = {"irq": "irq:", "napi": "napi:", "net": "net:", "skb": "skb:", "syscalls": "raw_syscalls:"}


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="trace_command", metavar="ACTION", required=True)
    r = sub.add_parser("record", help="record this host's kernel events during a time or a command",
                       description="Record kernel trace events in a tracefs instance of nicrig's own (the global "
                                   "tracer is never touched), on the mono clock (CLOCK_MONOTONIC, ns), into a "
                                   "capture set. Needs root.")
    r.add_argument("-o", "--output", required=True, metavar="FILE.h5", help="capture set to write")
    r.add_argument("--force", action="store_true", help="replace FILE.h5 if it exists (it is not replaced without)")
    r.add_argument("--events", metavar="LIST",
                   help="comma-separated system:event names or groups (irq, napi, net, skb, syscalls); "
                        "default: every group, system calls only when there are threads to follow (-- COMMAND "
                        "or --pid)")
    r.add_argument("--sched", action="store_true", help="also record sched:sched_switch (every CPU's switches)")
    r.add_argument("--pid", type=int, action="append", default=[], metavar="TID",
                   help="thread whose system calls to record (repeatable; with -- COMMAND, the command's "
                        "main thread is recorded too)")
    r.add_argument("--duration", type=float, metavar="S", help="record for S seconds (Ctrl-C stops early)")
    r.add_argument("--buffer-kb", type=int, default=4096, metavar="KB", help="ring buffer per CPU (default 4096)")
    r.add_argument("--max-mb", type=float, default=512, metavar="MB",
                   help="stop recording at this many MB of sub-buffers (default 512)")
    r.add_argument("--host", default="local", metavar="LABEL", help="label of this host in the file (default local)")
    r.add_argument("--json", action="store_true", help="print the summary as JSON")
    r.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- COMMAND", help="command to run while recording")
    e = sub.add_parser("export", help="write a file's aligned timeline (host events, decoded bus transactions, "
                                      "frames, packets) as a Perfetto trace for ui.perfetto.dev",
                       description="The timeline the GUI shows (deskew and clock offsets applied) as a Perfetto "
                                   "protobuf trace: a track per lane, a slice per event.")
    e.add_argument("file", metavar="FILE.h5", help="capture set or udpmon results file")
    e.add_argument("-o", "--output", required=True, metavar="OUT.perfetto-trace",
                   help="the trace to write (under a temporary name, renamed into place when complete)")
    e.add_argument("--json", action="store_true", help="print what was written as JSON")
    s = sub.add_parser("show", help="summarise the host traces of a file")
    s.add_argument("file", metavar="FILE.h5")
    s.add_argument("--json", action="store_true", help="print the summary as JSON")


def choose_events(spec: str | None, sched: bool, have_pids: bool) -> tuple[str, ...]:
    """The events to record from ``--events`` (names or groups); system calls only when there is a pid."""
    from nicrig.acquisition.hostprobe.recorder import DEFAULT_EVENTS, PER_PROCESS

    if spec is None:
        chosen = [e for e in DEFAULT_EVENTS if have_pids or e not in PER_PROCESS]
    else:
        chosen = []
        for item in (s.strip() for s in spec.split(",") if s.strip()):
            if item in GROUPS:
                chosen += [e for e in DEFAULT_EVENTS if e.startswith(GROUPS[item])]
            elif ":" in item:
                chosen.append(item)
            else:
                raise UsageError(f"--events: {item!r} is neither system:event nor one of {', '.join(GROUPS)}")
    if sched:
        chosen.append("sched:sched_switch")
    return tuple(dict.fromkeys(chosen))


def run(args: argparse.Namespace) -> int:
    if args.trace_command == "show":
        return _show(args)
    if args.trace_command == "export":
        return _export(args)
    return _record(args)


def _export(args: argparse.Namespace) -> int:
    from pathlib import Path

    from nicrig.gui.perfetto import export
    from nicrig.h5file import open_any
    from nicrig.progress import Progress

    out = Path(args.output)
    if not out.parent.is_dir():
        raise UsageError(f"{out}: folder {out.parent} does not exist")
    open_any(args.file).close()  # a missing or foreign file is the error to report
    with Progress() as bar:
        counts = export(Path(args.file), out, bar.task(f"trace export: writing {out.name}", unit="events"))
    if args.json:
        json.dump({"file": str(out), **counts}, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(f"wrote {out}: {counts['slices']} slices and {counts['instants']} instants on {counts['tracks']} "
              f"tracks; time 0 of the view is "
              f"{counts['zero_ns']} ns in the trace (open it at ui.perfetto.dev)")
    return 0


def _record(args: argparse.Namespace) -> int:
    from nicrig.acquisition.capture import CaptureSet
    from nicrig.acquisition.hostprobe import events, tracefs
    from nicrig.acquisition.hostprobe.recorder import RecordSpec

    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if bool(cmd) == (args.duration is not None):
        raise UsageError("give either --duration S or -- COMMAND")
    if args.duration is not None and args.duration <= 0:
        raise UsageError("--duration must be positive")
    tracefs.root()  # not root: a clear error and exit 2 before anything else happens
    out = CaptureSet.create(args.output, notes="host trace recorded by nicrig trace record", overwrite=args.force)
    child = _held(cmd) if cmd else None
    try:
        pids = ([child.pid] if child else []) + list(args.pid)
        spec = RecordSpec(events=choose_events(args.events, args.sched, bool(pids)), pids=tuple(pids),
                          buffer_kb=args.buffer_kb, max_bytes=int(args.max_mb * (1 << 20)),
                          max_seconds=(args.duration or 0) + 3600.0)
        code = 0
        previous = signal.signal(signal.SIGTERM, _interrupt)  # SIGTERM ends the recording as Ctrl-C does
        with events.HostCapture(args.host, spec) as cap:
            try:  # from the line saying so on, Ctrl-C or SIGTERM stops early and keeps what was recorded
                print(f"nicrig: recording {len(spec.events)} kernel events in tracefs instance "
                      f"{cap.instance} (Ctrl-C stops)", file=sys.stderr, flush=True)
                if child is not None:
                    os.kill(child.pid, signal.SIGCONT)
                    code = child.wait()
                else:
                    time.sleep(args.duration)
            except KeyboardInterrupt:
                if child is not None:
                    code = child.wait()
                print("nicrig: stopped early; keeping what was recorded", file=sys.stderr)
            finally:
                signal.signal(signal.SIGTERM, previous)
            trace = cap.finish()
        events.write(out, trace)
    except BaseException:
        out.abandon()
        if child is not None and child.poll() is None:
            child.kill()
            child.wait()
        raise
    out.close()
    _print_summary(events.describe(trace), args.json, str(out.path), stderr=True)
    return code


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def _held(cmd: list[str]) -> subprocess.Popen[bytes]:
    """Start ``cmd`` stopped before its first instruction (a shell stops itself, then execs the command in
    the same process): tracing and its per-pid filter go on before SIGCONT lets it run."""
    try:
        child = subprocess.Popen(["/bin/sh", "-c", 'kill -STOP $$; exec "$@"', "sh", *cmd])
    except OSError as exc:
        raise UsageError(f"cannot run {cmd[0]}: {exc.strerror or exc}") from None
    _, status = os.waitpid(child.pid, os.WUNTRACED)
    if not os.WIFSTOPPED(status):
        child.returncode = os.waitstatus_to_exitcode(status)
        raise UsageError(f"{cmd[0]}: the command ended before it could be started under tracing")
    return child


def _print_summary(info: dict[str, Any], as_json: bool, path: str, stderr: bool = False) -> None:
    """The summary of a trace; ``stderr`` keeps a recorded command's own output alone on stdout."""
    if as_json:
        json.dump({"file": path, **info}, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return
    out = sys.stderr if stderr else sys.stdout
    print(f"{path}: host {info['host']} ({info['hostname']}), clock {info['clock']}, {info['span_s']:.3f} s, "
          f"{info['events']} events, {info['lost_events']} lost"
          + (f", {info['unreadable_subbuffers']} unreadable sub-buffers (their events lost)"
             if info["unreadable_subbuffers"] else "")
          + (f", {info['unknown_records']} records of events without a format (not decoded)"
             if info["unknown_records"] else "")
          + (f", {info['truncated']}" if info["truncated"] else ""), file=out)
    for name, count in info["by_event"].items():
        print(f"  {name:32s} {count:10d}", file=out)


def _show(args: argparse.Namespace) -> int:
    from nicrig.acquisition.hostprobe import events
    from nicrig.h5file import open_any

    with open_any(args.file) as f:
        infos = [events.describe(events.read(f, h)) for h in events.hosts(f)]
    if not infos:
        raise UsageError(f"{args.file}: holds no host trace")
    if args.json:  # as record's summary, the file named once with its hosts' summaries
        json.dump({"file": args.file, "hosts": infos}, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        for info in infos:
            _print_summary(info, False, args.file)
    return 0
