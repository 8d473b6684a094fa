"""The simulated hosts' receive path (Linux 2.4), their NIC settings and their noise, on the model's own runs.

The interrupt service hands frames to the NET_RX softirq, which runs IP and
UDP into the receiving socket; a datagram whose buffer does not fit is
dropped and counted where the kernel counts it (UDP RcvbufErrors); the
application reads one datagram a call and, when it had blocked, is woken.
An e1000 of 2002 may refill its ring from a tasklet after the stack. The
interrupt timers: an 8254x packet timer of 0 interrupts at once, a Tigon
counts ticks and frames. A Tigon moves a frame to memory as it arrives. A
host profile carries its drivers' settings and its noise.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from nicrig.acquisition.sim import application, profiles
from nicrig.acquisition.sim.model import Rig, RigRun, Scenario
from nicrig.acquisition.sim.noise import SHAPE, HostNoise
from nicrig.errors import UsageError

STREAM_11US = Scenario(kind="stream", size_bytes=1400, count=900, spacing_us=11.0)
QUIET = dict(irq_jitter_us=0.0, wakeup_jitter_us=0.0, cache_jitter_us=0.0, tail_probability=0.0)


def simulate(scenario: Scenario, nic: str = "intel-pro1000", host: str = "supermicro-370dle", bus: str = "pci64-66",
             *, nic_changes: dict | None = None, host_changes: dict | None = None,
             recv_changes: dict | None = None) -> RigRun:
    n = dataclasses.replace(profiles.load("nic", nic), **(nic_changes or {}))
    h = dataclasses.replace(profiles.load("host", host), **(host_changes or {}))
    b = dataclasses.replace(h, **recv_changes) if recv_changes else None
    return Rig(scenario, profiles.load("bus", bus), n, h, recv_host=b).run()


def round_trips_us(run: RigRun) -> np.ndarray:
    rows = {(r[1], r[0]): r for r in run.packets}
    return np.array([(rows[("response", s)][6] - r[4]) / 1e6 for (k, s), r in sorted(rows.items())
                     if k == "request" and rows[("response", s)][6] >= 0])


def received_us(run: RigRun) -> np.ndarray:
    return np.sort([r[6] for r in run.packets if r[6] >= 0]) / 1e6


# -- the socket ------------------------------------------------------------------------------------

def test_a_receiver_slower_than_its_sender_drops_at_its_socket_and_counts_it():
    """Without flow control (the SK-9843) a stream faster than the receiver's CPU fills the socket's buffer: every
    message lost is one the receiving kernel dropped and counted (UDP RcvbufErrors), none at the NIC."""
    run = simulate(Scenario(kind="stream", size_bytes=1472, count=400, spacing_us=14.0), "sk9843",
                   host_changes=QUIET)
    lost = [r[0] for r in run.packets if r[6] < 0]
    assert lost and run.counters["recv_udp_rcvbuf_errors"] == len(lost) == len(run.dropped["recv"])
    assert sorted(run.dropped["recv"]) == lost
    assert run.counters["recv_rx_fifo_overflow"] == 0
    assert run.counters["recv_udp_in_datagrams"] == 400 - len(lost)
    # In the results, as the point's kernel drops.
    point = application.stream_points(run, Scenario(kind="stream", size_bytes=1472, count=400, spacing_us=14.0))[0]
    assert point.kernel_drops == len(lost) and len(point.seq) == 400 - len(lost)


def test_a_larger_socket_buffer_holds_a_burst_a_small_one_drops():
    """A burst of 40 datagrams at the wire's pace into a receiver that takes longer for each: the default 64 KB
    (about 29 of the e1000's 2 KB buffers) drops part of it, 256 KB holds it all."""
    burst = Scenario(kind="stream", size_bytes=1472, count=40, spacing_us=0.0)
    small = simulate(burst, "sk9843", host_changes=QUIET)
    large = simulate(burst, "sk9843", host_changes={**QUIET, "rcvbuf_bytes": 262144})
    assert small.counters["recv_udp_rcvbuf_errors"] > 0
    assert large.counters["recv_udp_rcvbuf_errors"] == 0 and len(received_us(large)) == 40


def test_a_blocked_receiver_pays_the_wake_up_twice_a_round_trip_and_never_in_a_saturated_stream():
    latency = Scenario(kind="latency", size_bytes=512, count=5)
    base = round_trips_us(simulate(latency, "sk9843", host_changes={**QUIET, "wakeup_us": 0.0}))
    woken = round_trips_us(simulate(latency, "sk9843", host_changes={**QUIET, "wakeup_us": 5.0}))
    assert np.allclose(woken - base, 10.0, atol=0.05), woken - base
    # A receiver well behind its sender (its stack far slower) finds the next datagram waiting: of 30 it sleeps
    # before the first and only now and then while the softirq, which goes first, works through the burst.
    stream = Scenario(kind="stream", size_bytes=1472, count=30, spacing_us=0.0)
    slow = {**QUIET, "rx_sw_us": 20.0, "rcvbuf_bytes": 262144}
    plain = received_us(simulate(stream, "sk9843", host_changes={**slow, "wakeup_us": 0.0}))
    woken = received_us(simulate(stream, "sk9843", host_changes={**slow, "wakeup_us": 5.0}))
    assert len(woken) == len(plain) == 30 and 4.9 < woken[0] - plain[0] < 5.1
    assert woken[-1] - plain[-1] < 3 * 5.0 + 0.1


def test_a_streams_kernel_stamps_are_netif_rxs_a_service_apart_and_before_the_application_reads():
    """The results' kernel stamps are those Linux 2.4's netif_rx gives (SO_TIMESTAMP): the frames one coalesced
    interrupt handed to the stack carry stamps its handler's time per frame apart, each before the application
    read its datagram; so the report's stream estimator finds the batches and gives its rate an interval."""
    scenario = Scenario(kind="stream", size_bytes=1400, count=60, spacing_us=11.0)
    run = simulate(scenario, host_changes=QUIET)
    point = application.stream_points(run, scenario)[0]
    assert len(point.seq) == 60 and np.all(point.kernel_ns < point.user_ns)
    gaps = np.diff(np.sort(point.kernel_ns)) / 1000
    handler = profiles.load("host", "supermicro-370dle").rx_handler_us
    assert np.isclose(gaps.min(), handler, atol=0.01) and gaps.max() > 50
    from nicrig.analysis.throughput import receive_rate
    rate = receive_rate(point.kernel_ns, point.seq, 1400, link_rate_bps=1e9)
    assert 0 < rate.user_rate_ci95_mbps < 0.05 * rate.user_rate_mbps


def test_the_370dles_sk9843_takes_longer_a_message_and_its_receive_service_longer_a_frame():
    """The 370DLE's sk98lin settings (its ``nic`` table) give the SK-9843 3.0 us more a message than the NIC
    profile's: 0.5 us from the send's start command to the descriptor fetch, 1.5 us from a received frame's DMA
    to its interrupt and 1.0 us of CPU in the receive service (``rx_driver_us``). A round trip pays them twice;
    the receiving host's CPU the last once a frame, in a stream it keeps up with."""
    plain = {**QUIET, "nic": {}}
    driver_us = profiles.load("host", "supermicro-370dle").nic["sk9843"]["rx_driver_us"]
    latency = Scenario(kind="latency", size_bytes=512, count=5)
    later = round_trips_us(simulate(latency, "sk9843", host_changes=QUIET))
    base = round_trips_us(simulate(latency, "sk9843", host_changes=plain))
    assert np.allclose(later - base, 2 * 3.0, atol=0.05), later - base
    stream = Scenario(kind="stream", size_bytes=1472, count=200, spacing_us=40.0)
    runs = [simulate(stream, "sk9843", host_changes=h) for h in (QUIET, plain)]
    assert all(r.counters["recv_udp_rcvbuf_errors"] == 0 for r in runs)
    busy_us = [np.diff(r.cpu_busy["recv"], axis=1).sum() / 1e6 for r in runs]
    # (give or take a register read's wait for the bus, which the later service meets at another moment)
    assert busy_us[0] - busy_us[1] == pytest.approx(200 * driver_us, abs=2.0), busy_us


def test_fragments_of_a_datagram_reach_the_application_as_one():
    run = simulate(Scenario(kind="latency", size_bytes=4000, count=3), host_changes=QUIET)
    assert len(round_trips_us(run)) == 3
    assert run.counters["send_udp_in_datagrams"] == 3 and run.counters["send_reasm_fails"] == 0


def test_the_receiving_cpu_load_of_a_point_is_its_busy_time_over_its_processors():
    """A load is the host's busy time over the point's interval and over all its processors (/proc/stat's jiffies).
    Four processors do one's work but for the receiving application's wake-ups. On one processor the application
    runs once the NET_RX softirq has queued all of an interrupt's datagrams, so it blocks once an interrupt. On a
    processor of its own (Linux 2.4 SMP) it takes each datagram as the stack delivers it, every ``s`` (the stack's
    share of ``rx_sw_us``), in ``a`` (``rx_app_us`` and the copy): faster than the stack, it makes up its wake-up
    ``w`` within ceil(w / (s - a)) datagrams, blocks, and is woken again by the next of the same interrupt."""
    scenario = Scenario(kind="stream", size_bytes=1472, count=200, spacing_us=40.0)
    host = profiles.load("host", "supermicro-370dle")

    def runs(changes: dict) -> tuple[RigRun, RigRun]:
        return tuple(simulate(scenario, host_changes={**QUIET, **changes, "cpus": cpus}) for cpus in (1, 4))

    def load(run: RigRun) -> float:
        return application.stream_points(run, scenario)[0].remote_cpu_busy_pct

    def busy_ps(run: RigRun) -> int:
        return int(np.diff(run.cpu_busy["recv"], axis=1).sum())

    def batches(run: RigRun) -> list[int]:
        return [row[3] for row in run.interrupts if row[0] == "recv" and row[3]]

    # Waking costing nothing, the same work: a quarter of the load.
    one, four = runs({"wakeup_us": 0.0})
    assert busy_ps(four) == busy_ps(one)
    assert 5 < load(one) < 100
    assert load(four) == pytest.approx(load(one) / 4, rel=1e-9)
    # Waking costing the profile's wakeup_us, all of it work (no idle loop to leave): the same interrupts take the
    # same frames, and the application on its own processor blocks again in each batch longer than it needs to
    # catch up (here 4 frames, at the absolute timer's 120 us against the stream's 40 us).
    one, four = runs({"wakeup_idle_us": 0.0})
    assert batches(four) == batches(one)
    stack_us = host.rx_sw_us - host.rx_handler_us - host.rx_app_us
    app_us = host.rx_app_us + host.copy_ns_per_byte * scenario.size_bytes / 1000
    per_wake = math.ceil(host.wakeup_us / (stack_us - app_us))
    extra_wakes = sum(math.ceil(n / per_wake) - 1 for n in batches(one))
    assert extra_wakes > 0
    assert busy_ps(four) - busy_ps(one) == extra_wakes * round(host.wakeup_us * 1e6)


def _overlapping(intervals: np.ndarray) -> bool:
    """Whether any two of these busy intervals overlap (two processors busy at once)."""
    b = intervals[np.argsort(intervals[:, 0])]
    return bool(np.any(b[1:, 0] < np.maximum.accumulate(b[:-1, 1])))


def test_an_smp_hosts_application_runs_beside_its_stack_and_wakes_from_idle():
    """With several processors (Linux 2.4 SMP) the receiving application has one of its own, beside the interrupt
    service and the softirq: at times both are busy, which one processor never is. Of its wake-up,
    ``wakeup_idle_us`` is that processor leaving its idle loop: the round trip waits as long, the host works less."""
    stream = Scenario(kind="stream", size_bytes=1472, count=200, spacing_us=0.0)
    assert not _overlapping(simulate(stream, "sk9843", host_changes=QUIET).cpu_busy["recv"])
    assert _overlapping(simulate(stream, "sk9843", host_changes={**QUIET, "cpus": 2}).cpu_busy["recv"])
    latency = Scenario(kind="latency", size_bytes=512, count=5)
    smp = {**QUIET, "cpus": 2, "wakeup_us": 5.0}
    work, idle = (simulate(latency, "sk9843", host_changes={**smp, "wakeup_idle_us": w}) for w in (0.0, 4.0))
    assert np.allclose(round_trips_us(work), round_trips_us(idle), atol=1e-6)
    busy = [int(np.diff(r.cpu_busy["recv"], axis=1).sum()) for r in (work, idle)]
    assert busy[0] - busy[1] == 5 * 4_000_000  # five requests woke the responder, 4 us idle each (ps)
    with pytest.raises(UsageError, match="wakeup_idle_us"):
        dataclasses.replace(profiles.load("host", "supermicro-370dle"), wakeup_idle_us=5.0).check()


# -- the ring's refill -----------------------------------------------------------------------------

def test_refill_after_the_stack_returns_each_descriptor_with_a_tail_write():
    run = simulate(STREAM_11US, nic_changes=profiles.E1000_TASKLET_REFILL)
    recv = run.buses["recv_pci"]
    tail = profiles.load("nic", "intel-pro1000").bar0[0] + 0x2818
    refills = [t for t, p in zip(recv.transactions, recv.purposes) if p == "csr" and t.address == tail]
    received = sum(p == "rx_desc_writeback" for p in recv.purposes)
    assert received == STREAM_11US.count - run.counters["recv_rx_fifo_overflow"]
    assert len(refills) == received


def test_the_service_takes_the_frames_of_one_receive_timer():
    """In a stream at the wire's pace the service comes once the absolute timer (fig. 9.1's 120 us) has run from
    the first frame after the last service: about ten frames, as §4.2.1 counts."""
    run = simulate(STREAM_11US, host_changes=QUIET)
    taken = np.array([row[3] for row in run.interrupts if row[0] == "recv" and row[3]])
    timer_frames = profiles.load("nic", "intel-pro1000").rx_abs_int_delay_us / 11.73
    assert timer_frames <= np.median(taken) <= timer_frames + 2


# -- interrupt timers ------------------------------------------------------------------------------

def test_a_receive_packet_timer_of_zero_interrupts_at_once():
    """§8: RxInt 0 on the responder interrupts as soon as the request is in memory, the absolute timer unused (the
    8254x uses it only with a packet timer), where reading 0 as "no timer" left the absolute one."""
    latency = Scenario(kind="latency", size_bytes=512, count=4)
    e1000 = profiles.load("nic", "intel-pro1000")

    def request_to_interrupt_us(run: RigRun) -> float:
        """From each request's first byte on the wire to the responder's next interrupt."""
        asserts = np.array([row[1] for row in run.interrupts if row[0] == "recv"])
        wire = np.array([r[5] for r in run.packets if r[1] == "request"])
        return float(np.median([asserts[asserts > w][0] - w for w in wire])) / 1e6

    default = request_to_interrupt_us(simulate(latency, host_changes=QUIET))
    at_once = request_to_interrupt_us(simulate(latency, host_changes=QUIET, recv_changes={
        **QUIET, "nic": {"intel-pro1000": {"rx_int_delay_us": 0.0}}}))
    assert at_once < 5.0 < e1000.rx_int_delay_us < default < e1000.rx_int_delay_us + 5.0


def test_tigon_ticks_coalesce_from_the_first_frame_and_its_frame_count_cuts_them_short():
    alteon = profiles.load("nic", "alteon-acenic")
    stream = Scenario(kind="stream", size_bytes=1400, count=600, spacing_us=11.0)

    def received_per_service(**changes) -> float:
        run = simulate(stream, "alteon-acenic", nic_changes=changes, host_changes=QUIET)
        return float(np.median([row[3] for row in run.interrupts if row[0] == "recv" and row[3]]))

    assert received_per_service() == pytest.approx(alteon.rx_abs_int_delay_us / 11.73, abs=1.5)
    assert received_per_service(rx_max_coal_frames=4) == 4
    # A lone frame waits the whole ticks: a round trip holds two.
    lone = round_trips_us(simulate(Scenario(kind="latency", size_bytes=64, count=3), "alteon-acenic",
                                   host_changes=QUIET))
    assert np.all(lone > 2 * alteon.rx_abs_int_delay_us)


# -- receive cut-through ---------------------------------------------------------------------------

@pytest.mark.parametrize("bus", ["pci32-33", "pci64-66"])
def test_the_tigon_moves_a_frame_to_memory_while_it_arrives(bus):
    """Its first word on the receiving bus comes while the frame is still on the wire; on 64/66, faster than the
    wire, the DMA waits for the wire between its pieces (§4.3.3: "pausing of all the PCI signals") and ends
    just after the frame; on 32/33 it ends a bus transfer after the frame's start."""
    run = simulate(Scenario(kind="stream", size_bytes=1472, count=3, spacing_us=100.0), "alteon-acenic", bus=bus,
                   host_changes=QUIET)
    recv = run.buses["recv_pci"]
    clk, frame = run.probe_tx[-1]
    start = run.probe_clock.time_of(clk)
    end = start + (len(frame.data) + 8) * 8000
    data = [(recv.time_of(t.start_clk), t) for t, p in zip(recv.transactions, recv.purposes) if p == "rx_data"]
    mine = [(t0, t) for t0, t in data if t0 > start]
    first, last = mine[0][0], mine[-1][0]
    assert first < end - 5_000_000
    if bus == "pci64-66":
        assert last < end + 2_000_000
        gaps = np.diff([t0 for t0, _ in mine])
        assert gaps.max() > 500_000  # waiting for the wire
    else:
        assert last > end


# -- host settings and noise -----------------------------------------------------------------------

def test_a_host_profile_sets_its_nic_driver_and_the_p4dp6_has_fig_9_1s_70_us():
    p4dp6 = profiles.load("host", "supermicro-p4dp6")
    e1000 = profiles.load("nic", "intel-pro1000")
    mine = p4dp6.nic_with_settings(e1000)
    assert (mine.tx_abs_int_delay_us, mine.rx_abs_int_delay_us) == (70.0, 70.0)
    assert profiles.load("host", "supermicro-370dle").nic_with_settings(e1000) is e1000
    rig = Rig(STREAM_11US, profiles.load("bus", "pci64-66"), e1000, p4dp6)
    assert rig.nics[0].rx_abs_int_delay_us == rig.nics[1].rx_abs_int_delay_us == 70.0


def test_a_host_profile_with_an_unknown_nic_field_is_refused(tmp_path):
    from nicrig.errors import UsageError

    values = profiles.raw("host", "supermicro-370dle")
    values["nic"] = {"intel-pro1000": {"rx_int_dealy_us": 0.0}}
    path = tmp_path / "typo.toml"
    path.write_text(profiles.to_toml(values), encoding="utf-8")
    with pytest.raises(UsageError, match="rx_int_dealy_us"):
        profiles.load("host", str(path))


def test_noise_is_reproducible_from_the_seed_and_zero_mean():
    host = dataclasses.replace(profiles.load("host", "supermicro-370dle"), irq_jitter_us=0.5, tail_probability=0.0)
    a, b, c = HostNoise(host, 7, 0), HostNoise(host, 7, 0), HostNoise(host, 8, 0)
    draws = [a.irq() for _ in range(5000)]
    assert draws == [b.irq() for _ in range(5000)] and draws != [c.irq() for _ in range(5000)]
    us = np.array(draws) / 1e6
    assert abs(us.mean()) < 0.03 and us.std() == pytest.approx(0.5, rel=0.05)
    assert us.min() > -0.5 * np.sqrt(SHAPE) and np.mean(us > 0) < 0.5  # skewed late: the median below the mean
    assert HostNoise(dataclasses.replace(host, irq_jitter_us=0.0), 7, 0).irq() == 0


def test_a_noisy_host_spreads_its_round_trips_and_the_same_seed_repeats_them():
    latency = Scenario(kind="latency", size_bytes=512, count=60, seed=5)
    first, again = (round_trips_us(simulate(latency)) for _ in range(2))
    other = round_trips_us(simulate(dataclasses.replace(latency, seed=6)))
    quiet = round_trips_us(simulate(latency, host_changes=QUIET))
    assert np.array_equal(first, again) and not np.array_equal(first, other)
    assert np.ptp(quiet) < 0.05 and 1.0 < np.percentile(first, 88) - np.percentile(first, 12) < 4.0
