#!/usr/bin/env python3
"""Benchmark: is Python's epoll adequate for the suite's TCP tests? nicrig's loops beside C and iperf3.

Runs on 127.0.0.1 only:

1. **Connection rate**: nicrig's initiator (``nicrig.udpmon.tcp.initiate``,
   unthrottled) opens and closes ``--connections`` connections against
   nicrig's acceptor (``accept_and_close``) in another process; then the same
   open / wait for the acceptor's close / close loop written in C (compiled
   here with the system's C compiler) against the same acceptor. Reports
   connections/s, the initiator's user and kernel CPU time, and the ratio.
2. **Bulk TCP**: nicrig's ``bulk_send`` over N connections to a
   ``bulk_receive`` in another process, beside ``iperf3 -P N`` (the same
   number of connections), for ``--seconds``; Gbit/s at the receiver.

On loopback both ends share the machine's CPUs and no NIC is involved: this
measures what the tools cost, which is the question. Rerun with
``.venv/bin/python bench/udpmon_tcp.py`` (needs cc and iperf3); paste the
table into docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import resource
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from nicrig.udpmon import tcp

HOST = "127.0.0.1"

C_INITIATOR = r"""
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
/* argv: port count; opens, waits for the peer's FIN, closes; at most 512 open at once, as nicrig's loop */
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
int main(int argc, char **argv) {
    int port = atoi(argv[1]), count = atoi(argv[2]), started = 0, done = 0, open_ = 0, failed = 0;
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET; a.sin_port = htons(port); inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    int ep = epoll_create1(0);
    struct epoll_event ev[64];
    char buf[4096];
    double t0 = now();
    while (done < count) {
        while (open_ < 512 && started < count) {
            int s = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
            connect(s, (struct sockaddr *)&a, sizeof a);
            struct epoll_event e = {.events = EPOLLOUT, .data.u64 = ((uint64_t)s << 1)};
            epoll_ctl(ep, EPOLL_CTL_ADD, s, &e);
            open_++; started++;
        }
        int n = epoll_wait(ep, ev, 64, 1000);
        for (int i = 0; i < n; i++) {
            int s = (int)(ev[i].data.u64 >> 1), established = (int)(ev[i].data.u64 & 1);
            if (!established) {
                int err = 0; socklen_t l = sizeof err;
                getsockopt(s, SOL_SOCKET, SO_ERROR, &err, &l);
                if (err) { close(s); open_--; done++; failed++; continue; }
                struct epoll_event e = {.events = EPOLLIN, .data.u64 = ((uint64_t)s << 1) | 1};
                epoll_ctl(ep, EPOLL_CTL_MOD, s, &e);
                continue;
            }
            ssize_t k = recv(s, buf, sizeof buf, 0);
            if (k <= 0 && !(k < 0 && errno == EAGAIN)) { close(s); open_--; done++; }
        }
    }
    double dt = now() - t0;
    struct rusage r; getrusage(RUSAGE_SELF, &r);
    printf("{\"seconds\": %f, \"failed\": %d, \"user_s\": %f, \"sys_s\": %f}\n", dt, failed,
           r.ru_utime.tv_sec + r.ru_utime.tv_usec * 1e-6, r.ru_stime.tv_sec + r.ru_stime.tv_usec * 1e-6);
    return 0;
}
"""


def _acceptor(port_q: mp.Queue, count: int) -> None:
    with tcp.listen_tcp((HOST, 0)) as listener:
        port_q.put(listener.getsockname()[1])
        tcp.accept_and_close(listener, peer_ip=HOST, max_connections=count, first_timeout_ns=10 * 10**9,
                             idle_timeout_ns=5 * 10**9, max_duration_ns=600 * 10**9)


def _with_acceptor(count: int, initiate) -> dict:
    q: mp.Queue = mp.Queue()
    proc = mp.Process(target=_acceptor, args=(q, count))
    proc.start()
    try:
        return initiate(q.get(timeout=10))
    finally:
        proc.join(30)


def _python_initiator(port: int, count: int) -> dict:
    before = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.monotonic()
    res = tcp.initiate((HOST, port), count=count, rate_per_s=1e9, max_duration_ns=600 * 10**9)
    dt = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_SELF)
    return {"seconds": dt, "failed": res.failed, "user_s": after.ru_utime - before.ru_utime,
            "sys_s": after.ru_stime - before.ru_stime}


def _c_initiator(binary: Path, port: int, count: int) -> dict:
    out = subprocess.run([str(binary), str(port), str(count)], capture_output=True, text=True, check=True,
                         timeout=600).stdout
    return json.loads(out)


def bench_connections(count: int, rounds: int) -> list[str]:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        return ["connection rate: no C compiler, the C initiator cannot be built"]
    with tempfile.TemporaryDirectory() as tmp:
        src, binary = Path(tmp) / "initiator.c", Path(tmp) / "initiator"
        src.write_text(C_INITIATOR)
        subprocess.run([cc, "-O2", "-o", str(binary), str(src)], check=True)
        rows: dict[str, list[dict]] = {"nicrig (Python epoll)": [], "C epoll": []}
        for r in range(rounds):
            order = list(rows) if r % 2 == 0 else list(reversed(rows))
            for name in order:
                fn = _python_initiator if name.startswith("nicrig") else (lambda p, c: _c_initiator(binary, p, c))
                rows[name].append(_with_acceptor(count, lambda port, fn=fn: fn(port, count)))
    lines = [(f"connection rate: {count} connections opened and closed, {rounds} rounds, same acceptor "
             f"(nicrig's, another process)"),
             f"{'initiator':<24} {'conn/s':>9} {'user s':>7} {'kernel s':>8} {'failed':>6}"]
    rates = {}
    for name, runs in rows.items():
        secs = sum(x["seconds"] for x in runs)
        rates[name] = count * len(runs) / secs
        lines.append(f"{name:<24} {rates[name]:>9.0f} {sum(x['user_s'] for x in runs) / len(runs):>7.2f} "
                     f"{sum(x['sys_s'] for x in runs) / len(runs):>8.2f} {sum(x['failed'] for x in runs):>6}")
    lines.append(f"nicrig / C: {rates['nicrig (Python epoll)'] / rates['C epoll']:.2f}")
    return lines


def _sink(port_q: mp.Queue, out_q: mp.Queue, connections: int) -> None:
    with tcp.listen_tcp((HOST, 0)) as listener:
        port_q.put(listener.getsockname()[1])
        socks, _ = tcp.accept_from(listener, peer_ip=HOST, count=connections, timeout_ns=10 * 10**9)
        got = tcp.bulk_receive(socks, max_duration_ns=600 * 10**9, idle_timeout_ns=5 * 10**9)
        tcp.close_all(socks)
        out_q.put(got.rate_bps)


def _nicrig_bulk(connections: int, seconds: float) -> float:
    port_q: mp.Queue = mp.Queue()
    out_q: mp.Queue = mp.Queue()
    proc = mp.Process(target=_sink, args=(port_q, out_q, connections))
    proc.start()
    socks = tcp.connect_all((HOST, port_q.get(timeout=10)), connections)
    tcp.bulk_send(socks, duration_ns=int(seconds * 1e9))
    tcp.close_all(socks)
    rate = out_q.get(timeout=60)
    proc.join(30)
    return rate


def _iperf3_bulk(connections: int, seconds: float) -> float:
    with socket.socket() as s:
        s.bind((HOST, 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(["iperf3", "-s", "-1", "-B", HOST, "-p", str(port)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        out = subprocess.run(["iperf3", "-c", HOST, "-p", str(port), "-P", str(connections), "-t", str(seconds),
                              "-J"], capture_output=True, text=True, check=True, timeout=seconds + 60).stdout
    finally:
        server.wait(30)
    return float(json.loads(out)["end"]["sum_received"]["bits_per_second"])


def bench_bulk(connections: int, seconds: float, rounds: int) -> list[str]:
    if shutil.which("iperf3") is None:
        return ["bulk TCP: iperf3 is not installed"]
    nic = [_nicrig_bulk(connections, seconds) for _ in range(rounds)]
    ipf = [_iperf3_bulk(connections, seconds) for _ in range(rounds)]
    mean_n, mean_i = sum(nic) / len(nic), sum(ipf) / len(ipf)
    return [f"bulk TCP: {connections} connections, {seconds:g} s, {rounds} rounds, Gbit/s at the receiver",
            f"{'nicrig (Python epoll)':<24} {mean_n / 1e9:>9.2f}", (f"{'iperf3 -P ' + str(connections):<24} "
            f"{mean_i / 1e9:>9.2f}"), f"nicrig / iperf3: {mean_n / mean_i:.2f}"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--connections", type=int, default=20000, help="connections per connection-rate run")
    ap.add_argument("--streams", type=int, default=4, help="TCP connections of the bulk runs")
    ap.add_argument("--seconds", type=float, default=3.0, help="seconds per bulk run")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    started = time.monotonic()
    print(f"udpmon TCP bench on {HOST}, {os.cpu_count()} CPUs, {os.uname().release}")
    print("\n".join(bench_connections(args.connections, args.rounds)))
    print()
    print("\n".join(bench_bulk(args.streams, args.seconds, args.rounds)))
    print(f"\n{time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
