"""Real test hosts for udpmon: Linux network namespaces joined by veth (and a bridge for three).

``two_hosts`` is a pytest fixture; import it into a conftest or test module::

    from netns import two_hosts  # noqa: F401

Each host is a network namespace of its own with loopback up and one veth
interface addressed from the RFC 2544 benchmarking range 198.18.0.0/15
(198.18.0.1/24, 198.18.0.2/24, ...), so no real network is ever a target.
Two hosts share one veth pair; three or more each have a veth into a bridge
that lives in a namespace of its own (its ports take any MTU a host's veth
can, so MTU sweeps on the hosts pass through it).  Names carry a random tag, so parallel
pytest-xdist workers never collide, and the namespaces are deleted when the
test ends, failed or not (processes started with ``popen`` are ended first).

Where namespaces cannot be made (not root, no ``ip``, ``ip netns add`` or veth
refused) every host is the root namespace on 127.0.0.1 over ``lo``:
``hosts.isolated`` is False and ``hosts.fallback_reason`` says why.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import pytest

SUBNET_PREFIX = "198.18.0."  # RFC 2544 benchmarking range
PREFIX_LEN = 24
LOOPBACK = "127.0.0.1"
BRIDGE_PORT_MTU = 65535  # veth's largest
COMMAND_TIMEOUT_S = 10


class NetnsError(RuntimeError):
    """An ``ip`` command failed while building the hosts."""


@dataclass
class Host:
    """One test host: a network namespace (or, in fallback, the root namespace)."""

    name: str
    address: str
    interface: str
    netns: str | None
    _ip: str = "ip"
    _children: list[subprocess.Popen] = field(default_factory=list, repr=False)

    def command(self, argv: Sequence[str]) -> list[str]:
        """``argv`` prefixed so that it runs inside this host's namespace."""
        argv = [str(a) for a in argv]
        return [self._ip, "netns", "exec", self.netns, *argv] if self.netns else argv

    def run(self, argv: Sequence[str], **kwargs) -> subprocess.CompletedProcess:
        """``subprocess.run`` inside the host; captures text output and times out by default."""
        kwargs.setdefault("capture_output", True)
        kwargs.setdefault("text", True)
        kwargs.setdefault("timeout", 60)
        return subprocess.run(self.command(argv), **kwargs)  # noqa: PLW1510 (caller's check=)

    def popen(self, argv: Sequence[str], **kwargs) -> subprocess.Popen:
        """``subprocess.Popen`` inside the host; still running at teardown, it is ended."""
        proc = subprocess.Popen(self.command(argv), **kwargs)
        self._children.append(proc)
        return proc

    def wait_listening(self, port: int, server: subprocess.Popen, timeout_s: float = 120.0) -> None:
        """Return once ``server`` (started in this host) accepts TCP connections on ``port``; fail if it
        exits or ``timeout_s`` passes (its imports alone take seconds on a loaded machine)."""
        probe = (f"import socket,sys\ntry:\n    socket.create_connection(({self.address!r}, {port}), 1).close()\n"
                 f"except OSError:\n    sys.exit(1)\n")
        end = time.monotonic() + timeout_s
        while self.run([sys.executable, "-c", probe]).returncode != 0:
            assert server.poll() is None, "the server exited"
            assert time.monotonic() < end, f"the server did not listen on port {port} within {timeout_s:g} s"
            time.sleep(0.1)


@dataclass
class Hosts:
    """The hosts of one test: ``hosts.a``, ``hosts.b`` (``hosts.c`` ... when asked for)."""

    hosts: list[Host]
    isolated: bool
    fallback_reason: str | None = None
    namespaces: list[str] = field(default_factory=list)  # every namespace made, bridge included
    prefix_len: int = PREFIX_LEN

    @property
    def mode(self) -> str:
        return "netns" if self.isolated else "loopback"

    def __getattr__(self, name: str) -> Host:
        if len(name) == 1 and "a" <= name <= "z":
            index = ord(name) - ord("a")
            if index < len(self.__dict__.get("hosts", [])):
                return self.hosts[index]
        raise AttributeError(name)

    def __iter__(self) -> Iterator[Host]:
        return iter(self.hosts)


def _ip(ip: str, *args: str) -> None:
    p = subprocess.run([ip, *args], capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S, check=False)
    if p.returncode != 0:
        raise NetnsError(f"{ip} {' '.join(args)}: {(p.stderr or p.stdout).strip() or p.returncode}")


def _ns_ip(ip: str, ns: str, *args: str) -> None:
    _ip(ip, "-n", ns, *args)


def namespaces_present(ip: str = "ip") -> set[str]:
    """Names of the network namespaces ``ip netns list`` shows."""
    p = subprocess.run([ip, "netns", "list"], capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S, check=False)
    return {line.split()[0] for line in p.stdout.splitlines() if line.strip()}


def _quiet_ipv6(ip: str, ns: str) -> None:
    """Best effort: no IPv6 in the namespace, so no router solicitations or DAD frames add to counters."""
    script = ("for f in /proc/sys/net/ipv6/conf/all/disable_ipv6 /proc/sys/net/ipv6/conf/default/disable_ipv6;"
              " do [ -w $f ] && echo 1 > $f; done; true")
    subprocess.run([ip, "netns", "exec", ns, "sh", "-c", script], capture_output=True, timeout=COMMAND_TIMEOUT_S, check=False)


def _end(children: list[subprocess.Popen]) -> None:
    for proc in children:
        if proc.poll() is None:
            proc.terminate()
    for proc in children:
        try:
            proc.wait(timeout=3)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=3)


def _teardown(ip: str, namespaces: list[str], links: list[str]) -> None:
    """Delete what was made; processes left inside our own namespaces are ended by pid."""
    for ns in namespaces:
        p = subprocess.run([ip, "netns", "pids", ns], capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S, check=False)
        for pid in p.stdout.split():
            try:
                os.kill(int(pid), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass
    for ns in namespaces:
        subprocess.run([ip, "netns", "del", ns], capture_output=True, timeout=COMMAND_TIMEOUT_S, check=False)
    for link in links:  # a veth end not yet moved into a namespace
        subprocess.run([ip, "link", "del", link], capture_output=True, timeout=COMMAND_TIMEOUT_S, check=False)


def _build(ip: str, count: int, tag: str, namespaces: list[str], links: list[str]) -> list[Host]:
    """Make the namespaces and links (recording each in ``namespaces``/``links`` as it appears)."""
    letters = [chr(ord("a") + i) for i in range(count)]
    hosts = []
    for letter in letters:
        ns = f"nicrig-{tag}-{letter}"
        _ip(ip, "netns", "add", ns)
        namespaces.append(ns)
        _ns_ip(ip, ns, "link", "set", "lo", "up")
        _quiet_ipv6(ip, ns)
        hosts.append(Host(name=letter, address=f"{SUBNET_PREFIX}{len(hosts) + 1}", interface=f"nr{tag}{letter}",
                          netns=ns, _ip=ip))
    if count == 2:
        a, b = hosts
        links += [a.interface, b.interface]
        _ip(ip, "link", "add", a.interface, "type", "veth", "peer", "name", b.interface)
        for h in hosts:
            _ip(ip, "link", "set", h.interface, "netns", h.netns)
            links.remove(h.interface)
    else:
        bridge_ns = f"nicrig-{tag}-br"
        _ip(ip, "netns", "add", bridge_ns)
        namespaces.append(bridge_ns)
        _ns_ip(ip, bridge_ns, "link", "add", "br0", "type", "bridge")
        _ns_ip(ip, bridge_ns, "link", "set", "br0", "up")
        for h in hosts:
            port = f"nr{tag}{h.name}p"
            links += [h.interface, port]
            _ip(ip, "link", "add", h.interface, "type", "veth", "peer", "name", port)
            _ip(ip, "link", "set", h.interface, "netns", h.netns)
            links.remove(h.interface)
            _ip(ip, "link", "set", port, "netns", bridge_ns)
            links.remove(port)
            _ns_ip(ip, bridge_ns, "link", "set", port, "master", "br0")
            # the bridge never limits a host's MTU: a sweep up to 65535 on the host side still passes
            _ns_ip(ip, bridge_ns, "link", "set", port, "mtu", str(BRIDGE_PORT_MTU))
            _ns_ip(ip, bridge_ns, "link", "set", port, "up")
    for h in hosts:
        _ns_ip(ip, h.netns, "addr", "add", f"{h.address}/{PREFIX_LEN}", "dev", h.interface)
        _ns_ip(ip, h.netns, "link", "set", h.interface, "up")
    return hosts


def _loopback_hosts(count: int, reason: str) -> Hosts:
    hosts = [Host(name=chr(ord("a") + i), address=LOOPBACK, interface="lo", netns=None) for i in range(count)]
    return Hosts(hosts=hosts, isolated=False, fallback_reason=reason)


@contextmanager
def netns_hosts(count: int = 2, *, ip: str = "ip") -> Iterator[Hosts]:
    """``count`` test hosts in their own network namespaces, or the loopback fallback (module docstring).

    ``ip`` names the iproute2 command (tests point it elsewhere to force the fallback).
    """
    if count < 2:
        raise ValueError("at least two hosts")
    if count > 26:
        raise ValueError("at most 26 hosts")
    if os.geteuid() != 0:
        hosts = _loopback_hosts(count, "not root: network namespaces need CAP_SYS_ADMIN")
    elif shutil.which(ip) is None:
        hosts = _loopback_hosts(count, f"{ip}: no such command (iproute2 not installed)")
    else:
        tag = secrets.token_hex(3)
        namespaces: list[str] = []
        links: list[str] = []
        try:
            hosts = Hosts(hosts=_build(ip, count, tag, namespaces, links), isolated=True, namespaces=namespaces)
        except (NetnsError, OSError, subprocess.TimeoutExpired) as e:
            _teardown(ip, namespaces, links)
            hosts = _loopback_hosts(count, f"cannot make network namespaces: {e}")
        if hosts.isolated:
            try:
                yield hosts
            finally:
                _end([c for h in hosts for c in h._children])
                _teardown(ip, namespaces, [])
            return
    try:
        yield hosts
    finally:
        _end([c for h in hosts for c in h._children])


@pytest.fixture
def two_hosts() -> Iterator[Hosts]:
    """Two hosts ``a`` (198.18.0.1) and ``b`` (198.18.0.2) joined by a veth pair, or loopback fallback."""
    with netns_hosts(2) as hosts:
        yield hosts


@pytest.fixture
def three_hosts() -> Iterator[Hosts]:
    """Three hosts ``a``, ``b``, ``c`` (198.18.0.1-3) on one bridge, or loopback fallback."""
    with netns_hosts(3) as hosts:
        yield hosts
