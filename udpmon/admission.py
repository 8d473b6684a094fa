"""Who may start a handshake with ``nicrig udpmon serve``: admission before authentication.

The daemon admits connections the way OpenSSH's sshd admits them before
authentication (sshd_config(5): ``MaxStartups``, ``PerSourceMaxStartups``,
``PerSourcePenalties``, ``LoginGraceTime``):

* :class:`Startups` -- a global table of connections that have not
  authenticated yet, with random early drop between ``start`` and ``full``
  (:func:`drop_probability`), and a per-source cap;
* :func:`source_block` -- what counts as one source (an IPv4 address, an IPv6
  /64, all of loopback);
* :class:`Penalties` -- seconds of penalty a source earns by failing or
  stalling a handshake; while they exceed a threshold its connections are
  closed at once;
* :func:`fd_budget` -- the table never holds more connections than the
  process's file-descriptor limit leaves room for.

All of it is bookkeeping on numbers and strings, driven by the daemon's event
loop (:mod:`nicrig.udpmon.daemon`), with an injectable clock for tests.
"""

from __future__ import annotations

import ipaddress
import time
from collections.abc import Callable
from dataclasses import dataclass

from nicrig.errors import UsageError

LOOPBACK_BLOCK = "loopback"
IPV6_PREFIX = 64  # one host usually holds a whole /64 (RFC 4291 §2.5.1), so it is one source


@dataclass(frozen=True)
class Startups:
    """Limits on connections that have not authenticated (OpenSSH ``MaxStartups start:rate:full``).

    Below ``start`` waiting connections every new one is admitted; from
    ``start`` on a new one is refused with probability ``rate_percent`` %,
    rising linearly to 100 % at ``full``. One source holds at most
    ``per_source`` of them: its oldest is closed to make room for its newest
    once it has waited ``evict_after_s`` (time enough for a handshake's
    round trip), else the newest is refused; so connections that sit silent
    can never lock out a client that shares their address, and a source that
    reconnects as fast as it is closed churns at most ``per_source /
    evict_after_s`` handshakes a second.
    """

    start: int = 16
    rate_percent: int = 30
    full: int = 64
    per_source: int = 10
    evict_after_s: float = 0.05

    def __post_init__(self) -> None:
        if not (1 <= self.start <= self.full and 0 <= self.rate_percent <= 100 and self.per_source >= 1
                and self.evict_after_s >= 0):
            raise UsageError(f"max startups {self.start}:{self.rate_percent}:{self.full} per source "
                             f"{self.per_source}: need 1 <= start <= full, 0 <= rate <= 100, per source >= 1")


def parse_startups(text: str, per_source: int) -> Startups:
    """``start:rate:full`` (or one number, ``full``, as OpenSSH reads it) as :class:`Startups`; UsageError."""
    parts = text.split(":")
    try:
        numbers = [int(p) for p in parts]
    except ValueError:
        raise UsageError(f"--max-startups {text!r}: expected start:rate:full, e.g. 16:30:64") from None
    if len(numbers) == 1:
        return Startups(start=numbers[0], rate_percent=100, full=numbers[0], per_source=per_source)
    if len(numbers) != 3:
        raise UsageError(f"--max-startups {text!r}: expected start:rate:full, e.g. 16:30:64")
    return Startups(start=numbers[0], rate_percent=numbers[1], full=numbers[2], per_source=per_source)


def drop_probability(waiting: int, startups: Startups) -> float:
    """Chance that a new connection is refused when ``waiting`` connections have not authenticated.

    0 below ``start``, ``rate``/100 at ``start``, rising linearly to 1 at
    ``full`` and beyond (sshd_config(5), MaxStartups).
    """
    s = startups
    if waiting < s.start:
        return 0.0
    if waiting >= s.full:
        return 1.0
    rate = s.rate_percent / 100.0
    return rate + (1.0 - rate) * (waiting - s.start) / (s.full - s.start)


def parse_ip(address: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """``address`` (a scope ``%eth0`` dropped, IPv4-mapped IPv6 turned back into IPv4), or None if it is none."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


def source_block(address: str) -> str:
    """The source a connection from ``address`` counts against.

    All loopback addresses (127.0.0.0/8, ::1, IPv4-mapped loopback) are one
    source -- any local user may bind any of them; an IPv4 address is its own
    source, an IPv6 address counts as its /64.
    """
    ip = parse_ip(address)
    if ip is None:
        return address
    if ip.is_loopback:
        return LOOPBACK_BLOCK
    if isinstance(ip, ipaddress.IPv6Address):
        return str(ipaddress.IPv6Network((ip, IPV6_PREFIX), strict=False))
    return str(ip)


# Seconds of penalty per kind of failed handshake (OpenSSH's PerSourcePenalties kinds).
PENALTY_S = {
    "authfail": 5.0,   # a wrong secret, or a non-loopback peer at a daemon without --secret-file
    "noauth": 1.0,     # closed, garbage or evicted before a valid auth message
    "grace": 10.0,     # the handshake deadline passed
}


class Penalties:
    """Per-source penalty seconds, enforced once a source has earned more than ``min_s`` of them.

    Each failure adds its :data:`PENALTY_S` to the source's penalty, which
    runs down in real time and is capped at ``max_s``; once it exceeds
    ``min_s`` the source is refused until it has run out (sshd_config(5),
    PerSourcePenalties). Blocks for which ``exempt`` is true earn none
    (loopback: every local controller shares it, so a penalty there would lock
    out the legitimate ones with the attacker). At most ``max_sources`` sources
    are remembered; past that the ones whose penalty ran out go first, then
    the ones closest to running out.
    """

    def __init__(self, *, min_s: float = 15.0, max_s: float = 600.0, max_sources: int = 65536,
                 exempt: Callable[[str], bool] = lambda block: block == LOOPBACK_BLOCK,
                 clock: Callable[[], float] = time.monotonic):
        self.min_s = min_s
        self.max_s = max_s
        self.max_sources = max_sources
        self.exempt = exempt
        self.clock = clock
        self._until: dict[str, float] = {}   # when each source's penalty runs out (clock seconds)
        self._enforced: set[str] = set()

    def add(self, block: str, kind: str) -> None:
        """Charge ``block`` the penalty of ``kind`` (a key of :data:`PENALTY_S`)."""
        if self.exempt(block):
            return
        now = self.clock()
        until = min(max(self._until.get(block, now), now) + PENALTY_S[kind], now + self.max_s)
        self._until[block] = until
        if until - now > self.min_s:
            self._enforced.add(block)
        if len(self._until) > self.max_sources:
            self._forget(now)

    def remaining_s(self, block: str) -> float:
        """Seconds ``block`` stays refused (0.0 when it may connect)."""
        left = self._until.get(block, 0.0) - self.clock()
        if left <= 0:
            self._until.pop(block, None)
            self._enforced.discard(block)
            return 0.0
        return left if block in self._enforced else 0.0

    def __len__(self) -> int:
        return len(self._until)

    def _forget(self, now: float) -> None:
        self._until = {b: t for b, t in self._until.items() if t > now}
        if len(self._until) > self.max_sources:
            self._until = dict(sorted(self._until.items(), key=lambda item: item[1])[-self.max_sources:])
        self._enforced &= set(self._until)


def fd_budget(soft_limit: int, in_use: int, reserve: int = 32) -> int:
    """Connections the pre-authentication table may hold without running the process out of descriptors.

    ``soft_limit`` is RLIMIT_NOFILE, ``in_use`` the descriptors open before
    any connection; ``reserve`` is kept for the session, its test (UDP
    socket, stop pipe), counters and ``ip`` commands. At least 1.
    """
    return max(1, soft_limit - in_use - reserve)
