"""Strangers against ``nicrig udpmon serve``: a script the admission tests run, on loopback or in a namespace.

    python udpmon_attack.py HOST PORT --holders 4 --reopen-s 2.5 --trickle 100 --flood 300 --seconds 20

* holders: connections that never send a byte, each closed and reopened every ``--reopen-s``
  (four of them used to lock every controller out);
* trickle: connections that send one garbage byte every 0.2 s and reopen when the daemon closes them
  (a refused connection used to be drained byte by byte for 256 KiB, a thread each);
* flood: connections opened as fast as the daemon closes them, never sending anything.

One thread, one selector; it prints one JSON line of counts when done (or on SIGTERM).
"""

from __future__ import annotations

import argparse
import errno
import json
import selectors
import signal
import socket
import sys
import time


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("host")
    ap.add_argument("port", type=int)
    ap.add_argument("--holders", type=int, default=0)
    ap.add_argument("--reopen-s", type=float, default=2.5)
    ap.add_argument("--trickle", type=int, default=0)
    ap.add_argument("--flood", type=int, default=0)
    ap.add_argument("--seconds", type=float, default=20.0)
    args = ap.parse_args(argv)
    stop = [False]
    signal.signal(signal.SIGTERM, lambda *_: stop.__setitem__(0, True))
    sel = selectors.DefaultSelector()
    counts = {"connects": 0, "closed_by_daemon": 0, "connect_errors": 0}
    # per connection: (kind, opened_at, next_byte_at)
    conns: dict[socket.socket, list] = {}

    def open_one(kind: str) -> None:
        s = socket.socket(socket.AF_INET6 if ":" in args.host else socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        err = s.connect_ex((args.host, args.port))
        if err not in (0, errno.EINPROGRESS):
            counts["connect_errors"] += 1
            s.close()
            return
        counts["connects"] += 1
        now = time.monotonic()
        conns[s] = [kind, now, now + 0.2]
        sel.register(s, selectors.EVENT_READ)

    def close(s: socket.socket) -> str:
        kind = conns.pop(s)[0]
        sel.unregister(s)
        s.close()
        return kind

    for kind, n in (("holder", args.holders), ("trickle", args.trickle), ("flood", args.flood)):
        for _ in range(n):
            open_one(kind)
    end = time.monotonic() + args.seconds
    reopen: list[tuple[float, str]] = []
    while not stop[0] and time.monotonic() < end:
        for key, _ in sel.select(0.05):
            s = key.fileobj
            try:
                data = s.recv(4096)
            except (BlockingIOError, InterruptedError):
                continue
            except OSError:
                data = b""
            if not data:
                counts["closed_by_daemon"] += 1
                kind = close(s)
                reopen.append((time.monotonic() + (0.0 if kind == "flood" else 0.1), kind))
        now = time.monotonic()
        for s, (kind, opened, next_byte) in list(conns.items()):
            if kind == "holder" and now - opened > args.reopen_s:
                close(s)
                open_one("holder")
            elif kind == "trickle" and now >= next_byte:
                conns[s][2] = now + 0.2
                try:
                    s.send(b"\x00", socket.MSG_NOSIGNAL)
                except OSError:
                    pass
        due = [r for r in reopen if r[0] <= now]
        reopen = [r for r in reopen if r[0] > now]
        for _, kind in due:
            open_one(kind)
    for s in list(conns):
        close(s)
    print(json.dumps(counts), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
