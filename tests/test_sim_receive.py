"""The receive path beyond the interrupt service, on the model's own runs.

Linux 2.4's split of the receive work: the service only hands frames to the
NET_RX softirq, and the e1000 of 2002 refills its ring from a tasklet after
the stack, one tail write a descriptor, so a receiver slower than the wire
runs out of descriptors once a ring's worth of frames and pauses its partner.
And the wake-up of a receiving application blocked in its receive call, which
every round trip pays twice and a saturated stream never.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from nicrig.acquisition.sim import calibration, profiles
from nicrig.acquisition.sim.model import Rig, RigRun, Scenario

STREAM_11US = Scenario(kind="stream", size_bytes=1400, count=900, spacing_us=11.0)


def simulate(scenario: Scenario, nic: str = "intel-pro1000", host: str = "supermicro-370dle", bus: str = "pci64-66",
             *, nic_changes: dict | None = None, host_changes: dict | None = None) -> RigRun:
    n = dataclasses.replace(profiles.load("nic", nic), **(nic_changes or {}))
    h = dataclasses.replace(profiles.load("host", host), **(host_changes or {}))
    return Rig(scenario, profiles.load("bus", bus), n, h).run()


def xoff_period_us(run: RigRun) -> float:
    """Median time between the receiver's PAUSE frames that stop its partner (XOFF), at the probe."""
    xoff = [clk * 8 / 1000 for clk, f in run.probe_rx if f.kind == "pause" and f.pause_quanta > 0]
    assert len(xoff) >= 3, "too few PAUSE frames for a period"
    return float(np.median(np.diff(xoff)))


def test_refill_after_the_stack_returns_each_descriptor_with_a_tail_write():
    run = simulate(STREAM_11US, nic_changes=calibration.E1000_SOFTIRQ)
    recv = run.buses["recv_pci"]
    tail = profiles.load("nic", "intel-pro1000").bar0[0] + 0x2818
    refills = [t for t, p in zip(recv.transactions, recv.purposes) if p == "csr" and t.address == tail]
    received = sum(p == "rx_desc_writeback" for p in recv.purposes)
    assert received == STREAM_11US.count and len(refills) == received
    assert run.counters["recv_rx_fifo_overflow"] == 0 and run.counters["recv_pause_sent"] >= 3


def test_with_the_split_a_receiver_slower_than_the_wire_pauses_the_sender_once_a_ring():
    """The refill waits for an empty backlog, which only the pause leaves time for: a period returns the whole
    ring, twice the descriptors about twice the period, each frame taking the receiver longer than the wire."""
    periods = {n: xoff_period_us(simulate(dataclasses.replace(STREAM_11US, count=2000),
                                          nic_changes={**calibration.E1000_SOFTIRQ, "rx_ring": n})) for n in (80, 160)}
    assert 1.8 < periods[160] / periods[80] < 2.2, periods
    assert 11.7 < periods[80] / 80 < 16, periods


def test_the_service_of_the_split_takes_the_frames_of_one_receive_timer():
    run = simulate(STREAM_11US, nic_changes=calibration.E1000_SOFTIRQ)
    taken = np.array([row[3] for row in run.interrupts if row[0] == "recv" and row[3]])
    timer_frames = profiles.load("nic", "intel-pro1000").rx_abs_int_delay_us / 11.73
    assert timer_frames <= np.median(taken) <= timer_frames + 2


def round_trips_us(run: RigRun) -> np.ndarray:
    rows = {(r[1], r[0]): r for r in run.packets}
    return np.array([(rows[(b"response" if isinstance(k, bytes) else "response", s)][6] - r[4]) / 1e6
                     for (k, s), r in rows.items() if k in ("request", b"request")])


def test_a_blocked_receiver_pays_the_wake_up_twice_a_round_trip_and_never_in_a_saturated_stream():
    latency = Scenario(kind="latency", size_bytes=512, count=5)
    base = round_trips_us(simulate(latency, "sk9843"))
    woken = round_trips_us(simulate(latency, "sk9843", host_changes={"wakeup_us": 5.0}))
    assert np.allclose(woken - base, 10.0, atol=0.05), woken - base
    # A receiver well behind its sender always has the next frame waiting: it never sleeps.
    stream = Scenario(kind="stream", size_bytes=1472, count=300, spacing_us=0.0)
    slow = {"rx_sw_us": 20.0}

    def received_us(run: RigRun) -> np.ndarray:
        return np.sort([r[6] for r in run.packets if r[6] >= 0]) / 1e6

    plain = received_us(simulate(stream, "sk9843", host_changes=slow))
    woken = received_us(simulate(stream, "sk9843", host_changes={**slow, "wakeup_us": 5.0}))
    # Only the first datagram, which found the application asleep, pays; the pace stays the receiver's.
    assert len(woken) == len(plain) and 4.9 < woken[0] - plain[0] < 5.1
    assert abs(np.ptp(woken) - np.ptp(plain)) < 0.001 * np.ptp(plain)
