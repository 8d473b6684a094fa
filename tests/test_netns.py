"""The network-namespace test hosts: they reach each other, are isolated, and leave nothing behind."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import run_unprivileged
from netns import namespaces_present, netns_hosts, three_hosts, two_hosts  # noqa: F401

TESTS = Path(__file__).parent

# Binds, says its port, answers one datagram with "echo:" + data, reports who sent it.
ECHO = """
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind((sys.argv[1], 0))
print(s.getsockname()[1], flush=True)
s.settimeout(20)
data, peer = s.recvfrom(2048)
s.sendto(b"echo:" + data, peer)
print(peer[0], data.decode(), flush=True)
"""

# Sends one datagram, prints the answer and who it came from.
ASK = """
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(20)
s.sendto(sys.argv[3].encode(), (sys.argv[1], int(sys.argv[2])))
data, peer = s.recvfrom(2048)
print(peer[0], data.decode())
"""


def _exchange(sender, receiver, message: str) -> None:
    echo = receiver.popen([sys.executable, "-c", ECHO, receiver.address], stdout=subprocess.PIPE, text=True)
    port = echo.stdout.readline().strip()
    assert port.isdigit(), f"echo server did not start: {port!r}"
    asked = sender.run([sys.executable, "-c", ASK, receiver.address, port, message])
    assert asked.returncode == 0, asked.stderr
    assert asked.stdout.split() == [receiver.address, f"echo:{message}"]
    out, _ = echo.communicate(timeout=20)
    assert out.split() == [sender.address, message]


def _links() -> str:
    return subprocess.run(["ip", "-br", "link"], capture_output=True, text=True, check=True).stdout


def test_two_hosts_exchange_udp(two_hosts):  # noqa: F811
    h = two_hosts
    if h.isolated:
        assert (h.a.address, h.b.address) == ("198.18.0.1", "198.18.0.2")
        assert h.a.netns != h.b.netns and h.a.interface != "lo"
    else:
        assert h.fallback_reason and h.a.address == h.b.address == "127.0.0.1" and h.a.interface == "lo"
    _exchange(h.a, h.b, "a-to-b")
    _exchange(h.b, h.a, "b-to-a")


def test_two_hosts_are_separate_namespaces(two_hosts):  # noqa: F811
    h = two_hosts
    if not h.isolated:
        pytest.skip(reason=f"loopback fallback: {h.fallback_reason}")
    b_addr = h.b.run(["ip", "-br", "addr"], check=True).stdout
    assert h.b.interface in b_addr and "198.18.0.2/24" in b_addr
    assert h.a.interface not in b_addr and "198.18.0.1" not in b_addr
    assert "lo" in b_addr and "UNKNOWN" in b_addr.split("lo", 1)[1].split("\n", 1)[0]  # loopback is up
    assert h.a.interface not in _links() and h.b.interface not in _links()
    assert set(h.namespaces) <= namespaces_present()
    mtu = h.a.run(["cat", f"/sys/class/net/{h.a.interface}/mtu"], check=True).stdout  # sysfs of the namespace
    assert int(mtu) == 1500


def test_three_hosts_on_a_bridge(three_hosts):  # noqa: F811
    h = three_hosts
    if h.isolated:
        assert [x.address for x in h] == ["198.18.0.1", "198.18.0.2", "198.18.0.3"]
        assert len(h.namespaces) == 4  # three hosts and the bridge
    _exchange(h.c, h.a, "c-to-a")
    _exchange(h.a, h.b, "a-to-b")


def test_namespaces_are_gone_afterwards():
    with netns_hosts(2) as h:
        names = list(h.namespaces)
        interfaces = [x.interface for x in h]
        if not h.isolated:
            pytest.skip(reason=f"loopback fallback: {h.fallback_reason}")
        assert set(names) <= namespaces_present()
    assert not set(names) & namespaces_present()
    assert not any(i in _links() for i in interfaces)


def test_cleanup_when_the_test_fails():
    with pytest.raises(RuntimeError, match="test failed"), netns_hosts(3) as h:
        names = list(h.namespaces)
        sleeper = h.a.popen(["sleep", "60"])
        raise RuntimeError("test failed")
    assert sleeper.poll() is not None  # ended by teardown
    if h.isolated:
        assert names and not set(names) & namespaces_present()


def test_parallel_sets_do_not_collide():
    with netns_hosts(2) as one, netns_hosts(2) as two:
        if not one.isolated:
            pytest.skip(reason=f"loopback fallback: {one.fallback_reason}")
        assert not set(one.namespaces) & set(two.namespaces)
        assert one.a.interface != two.a.interface
        _exchange(two.a, two.b, "second-set")  # same addresses, separate worlds
        _exchange(one.b, one.a, "first-set")


def test_fallback_without_ip_command():
    with netns_hosts(2, ip="/nonexistent/ip") as h:
        assert not h.isolated and h.mode == "loopback"
        assert "no such command" in h.fallback_reason
        assert (h.a.netns, h.b.interface, h.b.address) == (None, "lo", "127.0.0.1")
        assert h.a.run(["echo", "hi"]).stdout == "hi\n"
        _exchange(h.a, h.b, "over-lo")


_PROBE = f"""
import sys
sys.path.insert(0, {str(TESTS)!r})
from netns import netns_hosts
with netns_hosts(2) as h:
    print(h.mode, h.a.address, h.fallback_reason)
"""


def test_fallback_when_not_root():
    p = run_unprivileged([sys.executable, "-c", _PROBE], timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("loopback 127.0.0.1 ")


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root and setpriv")
def test_fallback_when_ip_netns_add_is_refused():
    # Root without capabilities (as in an unprivileged container): `ip netns add` fails.
    p = subprocess.run(["setpriv", "--inh-caps=-all", "--bounding-set=-all", sys.executable, "-c", _PROBE],
                       capture_output=True, text=True, timeout=60, check=False)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("loopback 127.0.0.1 cannot make network namespaces:"), p.stdout
