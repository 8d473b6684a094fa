"""The offset between two hosts' CLOCK_MONOTONIC, from request-response exchanges over the control connection.

Each exchange gives the near host's clock when the request left (``t1``) and
when the reply came back (``t4``), and the far host's clock read in between
(``t_far``). Whatever the path's asymmetry, the far reading was taken inside
[t1, t4] on the near clock, so the offset lies in [t1 - t_far, t4 - t_far]:
the midpoint, give or take half the round trip. The exchange with the
shortest round trip gives the tightest interval (the minimum-delay filter of
NTP, RFC 5905 section 10). The clocks are assumed not to drift apart
measurably during a run (CLOCK_MONOTONIC is disciplined by NTP on both hosts;
drift of tens of ppm over seconds is within the interval at these round trips).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

#: The running kernel's random boot id (proc(5)): equal on two ends of a connection, they read one CLOCK_MONOTONIC.
BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


@dataclass(frozen=True)
class ClockOffset:
    """Add ``offset_ns`` to far-host times to put them on the near host's clock; the truth lies within
    ``offset_ns`` +- ``uncertainty_ns``. ``exchanges``: how many the estimate chose from."""

    offset_ns: float
    uncertainty_ns: float
    exchanges: int


def estimate_offset(t1_ns: np.ndarray, t_far_ns: np.ndarray, t4_ns: np.ndarray) -> ClockOffset:
    """The offset and its half-width from the exchange with the shortest round trip (module docstring)."""
    t1, tf, t4 = (np.asarray(a, dtype=np.int64) for a in (t1_ns, t_far_ns, t4_ns))
    if t1.size == 0 or not (t1.shape == tf.shape == t4.shape):
        raise ValueError("need one or more exchanges, as equal-length arrays")
    rtt = t4 - t1
    if (rtt < 0).any():
        raise ValueError("a reply came back before its request left: not one clock on the near host")
    k = int(np.argmin(rtt))
    return ClockOffset(offset_ns=float((t1[k] + t4[k]) / 2 - tf[k]), uncertainty_ns=float(rtt[k] / 2),
                       exchanges=int(t1.size))


def boot_id() -> str:
    """This kernel's boot id ("" when unreadable)."""
    try:
        return BOOT_ID.read_text().strip()
    except OSError:
        return ""


def same_clock_offset(estimate: ClockOffset, far_boot_id: str | None) -> ClockOffset:
    """``estimate``, or exactly 0 when the far end runs on this very kernel (its boot id is ours: loopback, a
    network namespace) and the exchanges agree with a zero offset: one CLOCK_MONOTONIC, no interval to add."""
    here = boot_id()
    if here and far_boot_id == here and abs(estimate.offset_ns) <= estimate.uncertainty_ns:
        return ClockOffset(0.0, 0.0, estimate.exchanges)
    return estimate
