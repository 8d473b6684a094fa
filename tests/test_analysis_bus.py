"""Bus-level analysis from DECODED tables, checked against the simulator's truth and its configured profiles.

Each capture is simulated, decoded by the real sigrok decoders (``nicrig
decode``), analysed with ``nicrig.analysis.bus`` from the ``decoded/`` tables
only, and the results compared with ``truth/`` (which transaction served what
purpose, when each frame went on the wire) and with the profile values the
simulator was configured with: CSR setup, DMA rate, coalescence delay and
PAUSE quanta within 1%.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import csr_addresses, isr_exit_forms, simulate_set
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from nicrig.acquisition.capture import CaptureSet
from nicrig.acquisition.sim import profiles
from nicrig.acquisition.sim.rig import Recording
from nicrig.analysis import bus
from nicrig.decoders.tables import SCHEMAS

pytestmark = pytest.mark.sigrok


def decode(path: Path) -> Path:
    r = subprocess.run([sys.executable, "-m", "nicrig", "decode", str(path)], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    return path


def custom_nic(folder: Path, **changes: object) -> Path:
    """The Intel profile with some fields changed or added, as a lab would write its own TOML profile."""
    values = {**profiles.raw("nic", "intel-pro1000"), **changes}
    out = folder / f"{changes.get('name', 'custom')}.toml"
    out.write_text(profiles.to_toml(values), encoding="utf-8")
    return out


class Capture:
    """A decoded capture set, analysed, with its truth and profiles at hand."""

    def __init__(self, path: Path):
        with CaptureSet.open(path) as cs:
            self.decoded = {n: cs.read_table(n) for n in cs.table_names() if n.startswith("decoded/")}
            self.truth = {n: cs.read_table(n) for n in cs.table_names() if n.startswith("truth/")}
            self.sim = json.loads(cs.attrs["simulation"])
        d = self.decoded
        self.timeline = bus.bus_timeline(d["decoded/send_pci/pci"], d["decoded/send_pci/irq"],
                                         d["decoded/recv_pci/pci"], d["decoded/recv_pci/irq"],
                                         d["decoded/probe/ethernet"])

    def host(self, side: str) -> bus.HostBus:
        hb = self.timeline.send if side == "send" else self.timeline.recv
        assert hb is not None
        return hb

    def truth_groups(self, side: str, first: bytes, rest: tuple[bytes, ...]) -> list[np.ndarray]:
        """Truth transactions of ``side`` grouped per frame: each group opens with purpose ``first``."""
        t = self.truth[f"truth/{side}_pci/transactions"]
        t = t[np.isin(t["purpose"], (first, *rest))]
        # a descriptor the host bridge split, or a receive's data bursts, follow each other
        starts = np.flatnonzero((t["purpose"] == first) & np.concatenate([[True], t["purpose"][:-1] != first]))
        return [t[a:b] for a, b in zip(starts, list(starts[1:]) + [len(t)])]

    def truth_send_setups_ns(self, side: str) -> list[tuple[float, float]]:
        """The driver's send setups in truth: the profile's tx_csr register sequence, retries included, where it
        is not part of the service's update (isr_exit_csr, in any of its forms), which may write the same register."""
        nic = self.sim["nic"]
        seq = csr_addresses(nic, nic["tx_csr"])
        csr = self.truth[f"truth/{side}_pci/transactions"]
        csr = csr[csr["kind"] == b"csr"]
        done = csr[csr["purpose"] == b"csr"]
        in_update = np.zeros(len(done), dtype=bool)
        for update in isr_exit_forms(nic):
            for k in range(len(done) - len(update) + 1):
                if list(done["address"][k:k + len(update)]) == update:
                    in_update[k:k + len(update)] = True
        out = []
        for k in range(len(done) - len(seq) + 1):
            if list(done["address"][k:k + len(seq)]) != seq or in_update[k:k + len(seq)].any():
                continue
            start = done["t_start_ps"][k]
            retried = csr[(csr["purpose"] == b"csr_retry") & (csr["address"] == done["address"][k])
                          & (csr["t_end_ps"] <= start)]
            while len(retried) and start - retried["t_end_ps"][-1] < 500_000:
                start, retried = retried["t_start_ps"][-1], retried[:-1]
            out.append((start / 1000, done["t_end_ps"][k + len(seq) - 1] / 1000))
        return out


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("bus")


@pytest.fixture(scope="module")
def stream(folder) -> Capture:
    """Intel-like NIC with its own coalescence delays (timers from the first frame after an interrupt, as a
    Tigon's ticks), small receive resources (fewer descriptors than a timer's frames) and PAUSE quanta: flow
    control."""
    nic = custom_nic(folder, name="intel-lab", int_timer="ticks", rx_int_delay_us=0, tx_int_delay_us=0,
                     rx_abs_int_delay_us=40.96, tx_abs_int_delay_us=81.92, rx_ring=3,
                     rx_fifo_bytes=16384, fc_high_water_bytes=8192, fc_low_water_bytes=4096, pause_quanta=1000)
    return Capture(decode(simulate_set(folder, "stream", nic=str(nic), bus="pci64-66", kind="stream",
                                       size_bytes=1400, spacing_us=11, count=250)))


@pytest.fixture(scope="module", params=[("sk9843", "pci32-33", False), ("sk9843", "pci32-33", True),
                                        ("intel-pro1000", "pci64-66", False), ("alteon-acenic", "pci64-33", False),
                                        ("generic", "pcix64-133", False)],
                ids=lambda p: f"{p[0]}-{p[1]}{'-ad' if p[2] else ''}")
def latency(request, folder) -> Capture:
    nic, bus_name, with_ad = request.param
    name = f"lat-{nic}-{bus_name}-{with_ad}"
    return Capture(decode(simulate_set(folder, name, nic=nic, bus=bus_name, recording=Recording(with_ad=with_ad),
                                       kind="latency", size_bytes=3000, count=4)))


# -- what the simulator was configured with ------------------------------------------------------

def test_coalescence_delay_is_the_configured_one(stream):
    nic = stream.sim["nic"]
    for side, configured in (("recv", nic["rx_abs_int_delay_us"]), ("send", nic["tx_abs_int_delay_us"])):
        it = stream.host(side).interrupts
        assert it is not None and it.interrupts > 5
        # every interrupt, not just the median: each timer starts at its first cause
        assert it.dma_to_interrupt_us.count == it.interrupts
        assert it.dma_to_interrupt_us.minimum == pytest.approx(configured, rel=0.01)
        assert it.dma_to_interrupt_us.maximum == pytest.approx(configured, rel=0.01)


def test_interrupts_and_frames_per_interrupt_match_truth(stream):
    truth = stream.truth["truth/interrupts"]
    for side in ("send", "recv"):
        mine = truth[truth["host"] == side.encode()]
        it = stream.host(side).interrupts
        assert it.interrupts == len(mine)
        handled = (mine["rx_frames"] + mine["tx_frames"]).sum()
        assert it.frames_per_interrupt == pytest.approx(handled / len(mine), rel=0.05)
        # the interval a count of interrupts over the stream gives, to a clock of the bus
        period_us = np.median(np.diff(np.sort(mine["t_assert_ps"]))) / 1e6
        assert it.interval_us.count == len(mine) - 1 and abs(it.interval_us.median - period_us) < 0.05


def test_pause_quanta_and_pause_time_are_the_configured_ones(stream):
    p = stream.timeline.pause
    configured = stream.sim["nic"]["pause_quanta"]
    truth = stream.truth["truth/probe/frames"]
    truth_pauses = truth[(truth["kind"] == b"pause") & (truth["pause_quanta"] > 0)]
    assert p.xoff == len(truth_pauses) > 3
    assert p.quanta == (configured,)
    assert p.pause_us.median == pytest.approx(configured * 512 / 1e9 * 1e6, rel=0.01)
    assert p.xon == int(((truth["kind"] == b"pause") & (truth["pause_quanta"] == 0)).sum())
    # each XOFF leaves a gap in the sender's stream far above the usual inter-frame gap (96 ns)
    assert p.gap_us.minimum > 10 and p.usual_gap_us == pytest.approx(0.096, abs=0.002)
    assert all(f.direction == "rx" for f in p.frames)


def test_dma_rate_is_the_bus_width_times_its_clock(stream, latency):
    for cap in (stream, latency):
        prof = cap.sim["bus"]
        peak = prof["width_bits"] / 8 * prof["clock_hz"] / 1e6
        for side in ("send", "recv"):
            dma = cap.host(side).dma
            assert dma.clock_period_ns == pytest.approx(1e9 / prof["clock_hz"], rel=0.01)
            assert dma.peak_mbytes_per_s == pytest.approx(peak, rel=0.01)
            assert dma.burst_data_rate_mbytes_per_s == pytest.approx(peak, rel=0.01)


def test_per_frame_dma_matches_truth(stream):
    for side, first, rest, role in (("send", b"tx_desc_fetch", (b"tx_data",), "fetch"),
                                    ("recv", b"rx_data", (b"rx_desc_writeback",), "receive")):
        groups = stream.truth_groups(side, first, rest)
        mine = stream.host(side).activity.of_role(role)
        assert len(mine) == len(groups)
        # Without C/BE# a fetch's descriptor read and a writeback can swap places when they meet (both 16
        # bytes, one after the other): rare, and only the fetch's start moves.
        exact = [t for t, g in zip(mine, groups)
                 if abs(t.start_ns - g["t_start_ps"][0] / 1000) <= 1 and abs(t.end_ns - g["t_end_ps"][-1] / 1000) <= 1
                 and abs(t.bytes - g["bytes"].sum()) <= 8 * len(g)]
        assert len(exact) >= 0.97 * len(groups)
        assert all(abs(t.end_ns - g["t_end_ps"][-1] / 1000) <= 1 for t, g in zip(mine, groups))
        truth_rate = np.median([g["bytes"].sum() / (g["t_end_ps"][-1] - g["t_start_ps"][0]) * 1e6 for g in groups])
        timing = stream.host(side).dma
        got = timing.fetch_rate_mbytes_per_s if role == "fetch" else timing.receive_rate_mbytes_per_s
        assert got.median == pytest.approx(truth_rate, rel=0.01)


def _found(truth: list[tuple[float, float]], clusters: list[bus.CsrCluster]) -> list[tuple[float, float, float]]:
    """(truth start, truth duration, decoded duration) for each truth setup a decoded send cluster starts with."""
    by_start = {round(c.start_ns): c for c in clusters}
    out = []
    for a, b in truth:
        c = next((by_start[round(a) + d] for d in (0, -1, 1) if round(a) + d in by_start), None)
        if c is not None:
            out.append((a, b - a, c.duration_ns))
    return out


def test_csr_setup_per_send_matches_truth(stream, latency):
    # Request-response: a single-frame request's setup stands alone, found and timed exactly. So is the first
    # fragment's of a response when the driver's setup is several accesses, a pattern to learn; the setups
    # of later fragments overlap the DMA of the one before (docs/analysis.md).
    frames = latency.sim["scenario"]["size_bytes"] // 1472 + 1
    sides = [("send", 1)] + ([("recv", frames)] if len(latency.sim["nic"]["tx_csr"]) > 1 else [])
    for side, every in sides:
        truth = latency.truth_send_setups_ns(side)[::every]
        found = _found(truth, latency.host(side).activity.clusters_of_role("send"))
        assert len(found) == len(truth) == latency.sim["scenario"]["count"]
        for a, want, got in found:
            assert got == pytest.approx(want, rel=0.01, abs=1), f"{side} setup at {a} ns"
    # A stream: the driver's setups interleave with interrupt services now and then; most stand alone.
    truth = stream.truth_send_setups_ns("send")
    assert stream.host("send").csr.send_setup_us.median == pytest.approx(
        np.median([b - a for a, b in truth]) / 1000, rel=0.01)
    found = _found(truth, stream.host("send").activity.clusters_of_role("send"))
    exact = [f for f in found if abs(f[2] - f[1]) <= 0.01 * f[1]]
    assert len(exact) >= 0.75 * len(truth)


def test_stop_and_retries_match_truth(latency):
    for side in ("send", "recv"):
        t = latency.truth[f"truth/{side}_pci/transactions"]
        hb = latency.host(side)
        assert hb.csr.retries == int((t["purpose"] == b"csr_retry").sum())
        assert hb.stops.with_stop == int(t["stop_asserted"].sum())
        assert hb.stops.retries == int((t["termination"] == b"retry").sum())
        assert hb.stops.dma_with_stop == int((t["stop_asserted"] & (t["kind"] == b"dma")).sum())


def test_transfer_roles_match_truth_purposes(latency):
    for side in ("send", "recv"):
        t = latency.truth[f"truth/{side}_pci/transactions"]
        roles = [x.role for x in latency.host(side).activity.transfers]
        assert "other" not in roles
        descriptor = latency.sim["nic"]["descriptor_bytes"]
        assert roles.count("fetch") == t["bytes"][t["purpose"] == b"tx_desc_fetch"].sum() // descriptor
        assert roles.count("writeback") == t["bytes"][t["purpose"] == b"tx_desc_writeback"].sum() // descriptor
        assert roles.count("receive") == len(latency.truth_groups(side, b"rx_data", (b"rx_desc_writeback",)))


def test_frame_path_matches_truth(stream, latency):
    for cap in (stream, latency):
        packets = cap.truth["truth/packets"]
        frames = cap.truth["truth/probe/frames"]
        tx = frames[(frames["direction"] == b"tx") & (frames["kind"] != b"pause")]
        fetch = cap.truth_groups("send", b"tx_desc_fetch", (b"tx_data",))
        receive = cap.truth_groups("recv", b"rx_data", (b"rx_desc_writeback",))
        paths = cap.timeline.paths_out
        assert len(paths) == len(tx)
        for k, p in enumerate(paths):
            assert p.wire_start_ns == pytest.approx(tx["t_start_ps"][k] / 1000, abs=1)
            assert p.on_wire_us == pytest.approx((tx["length"][k] + 8) * 8 / 1000, abs=0.001)
            # the first word moved: a read the host bridge retried first moved none
            data = fetch[k][(fetch[k]["purpose"] == b"tx_data") & (fetch[k]["termination"] != b"retry")]
            assert p.send_first_word_ns == pytest.approx(data["t_start_ps"][0] / 1000, abs=1)
            assert p.recv_first_word_ns == pytest.approx(receive[k]["t_start_ps"][0] / 1000, abs=1)
        first = packets[packets["kind"] != b"response"]
        assert paths[0].wire_start_ns == pytest.approx(first["t_wire_start_ps"][0] / 1000, abs=1)


def test_a_frame_done_while_an_interrupt_is_asserted_belongs_to_the_next_only_behind_a_timer():
    """An interrupt at once for its frame covers a frame done while it is asserted (the service reads both
    causes); a coalescence timer's interrupt is raised by a timer that such a frame started."""
    def causes(ends, asserts, deasserts):
        return bus.first_causes(np.array(ends, float), np.array(asserts, float), np.array(deasserts, float), 0.1)
    # at once: INTA# at 5 and 30 with their frames; the frame at 6 was the first interrupt's
    assert causes([5, 6, 30], [5, 30], [7, 32]) == [5, 30]
    # timers: the frame at 26, done while the first interrupt was asserted (25-27), started the second's timer
    assert causes([5, 12, 26, 33], [25, 46], [27, 48]) == [5, 26]
    assert np.isnan(causes([5], [25, 46], [27, 48])[1])


def test_no_coalescence_on_a_per_frame_nic(latency):
    for side in ("send", "recv"):
        it = latency.host(side).interrupts
        configured = max(latency.sim["nic"][f"{d}{k}_int_delay_us"] for d in ("rx", "tx") for k in ("", "_abs"))
        if configured == 0:
            assert it.dma_to_interrupt_us.maximum < 0.1
        elif configured < 10:
            # a short receive timer of its own (the 370DLE's SK-9843: 1.7 us, restarted by each frame of a
            # message), its sends interrupting at once: no coalescence
            assert it.dma_to_interrupt_us.maximum >= configured - 0.1 and it.dma_to_interrupt_us.median < 10
        else:
            assert it.dma_to_interrupt_us.median > 10


def test_occupancy_matches_truth(stream):
    for side in ("send", "recv"):
        t = stream.truth[f"truth/{side}_pci/transactions"]
        occ = stream.host(side).occupancy
        wire = stream.timeline.wire_out
        # N frames on the link are N - 1 periods, from the first frame's start to the last one's
        t0 = wire.span_start_ns
        t1 = t0 + (wire.frames - 1) * wire.period_us.mean * 1000
        s = np.clip(t["t_start_ps"] / 1000, t0, t1)
        e = np.clip(t["t_end_ps"] / 1000, t0, t1)
        assert occ.busy_pct == pytest.approx(100 * (e - s).sum() / (t1 - t0), rel=0.01)
        assert occ.frames == wire.frames - 1
        assert occ.busy_pct == pytest.approx(100 * occ.busy_per_frame_us / occ.frame_period_us)


# -- arithmetic and bad input --------------------------------------------------------------------

def test_host_software_time_reproduces_seed_002_4_1_3():
    assert bus.host_software_time_us(56, 36) == 10


def test_frame_time_on_the_wire_is_seed_002s():
    assert bus.frame_time_on_wire_ns(1446) == pytest.approx(11_632)  # 1400 bytes of data: 11.6 us (4.1.3)


def test_spread_ignores_nan_and_says_when_empty():
    s = bus.spread([1.0, float("nan"), 3.0])
    assert (s.count, s.median, s.minimum, s.maximum) == (2, 2.0, 1.0, 3.0)
    assert bus.spread([]).empty


def _table(kind: str, n: int) -> np.ndarray:
    return np.zeros(n, dtype=[(name, typ) for name, typ, _ in SCHEMAS[kind]])


def test_empty_tables_give_empty_results():
    tl = bus.bus_timeline(_table("pci", 0), _table("irq", 0), _table("pci", 0), _table("irq", 0),
                          _table("ethernet", 0))
    assert tl.send.activity.transfers == () and tl.send.interrupts.interrupts == 0
    assert tl.paths_out == () and tl.pause.xoff == 0 and tl.wire_out is None
    assert np.isnan(tl.send.dma.clock_period_ns)


def _late_descriptors(cycles: int = 6) -> tuple[np.ndarray, np.ndarray]:
    """An SK-9843 round trip every 90 us on 64-bit PCI, as the simulated rig records it in state mode
    (no command probed): the request's descriptor and frame fetched, its descriptor written back, the
    response received and its descriptor written back 6 us late, split by the bridge in two halves
    every other time."""
    rows, frames = [], []
    for k in range(cycles):
        t = 90_000 * k
        rows += [(t, 135, 4), (t + 150, 285, 14), (t + 2460, 120, 4)]
        rows += [(t + 49_335 + 615 * j, 555, 32) for j in range(5)] + [(t + 52_410, 510, 30)]
        late = t + 58_575
        rows += [(late, 105, 2), (late + 165, 90, 2)] if k % 2 else [(late, 135, 4)]
        frames += [(t + 1_482, 944, b"tx", 110), (t + 36_042, 12_208, b"rx", 1518)]
    pci = _table("pci", len(rows))
    pci["t_ns"], pci["data_phases"] = [r[0] for r in rows], [r[2] for r in rows]
    pci["t_end_ns"] = [r[0] + r[1] for r in rows]
    pci["kind"], pci["wide"], pci["bytes"], pci["termination"] = b"dma", True, -1, b"normal"
    eth = _table("ethernet", len(frames))
    eth["t_ns"], eth["t_end_ns"] = [f[0] for f in frames], [f[0] + f[1] for f in frames]
    eth["direction"], eth["length"] = [f[2] for f in frames], [f[3] for f in frames]
    eth["fcs_ok"], eth["pause_quanta"], eth["ethertype"] = True, -1, 0x0800
    return pci, eth


def test_a_late_descriptor_split_in_halves_is_no_fetch():
    pci, eth = _late_descriptors()
    tl = bus.bus_timeline(pci, _table("irq", 0), pci, _table("irq", 0), eth)
    roles = [t.role for t in tl.send.activity.transfers]
    assert roles == ["fetch", "writeback", "receive"] * 6
    assert [len(t.rows) for t in tl.send.activity.transfers if t.role == "receive"] == [7, 8] * 3
    assert [p.send_dma_to_wire_us for p in tl.paths_out] == pytest.approx([1.332] * 6)


def _random_pci(draw: st.DrawFn) -> np.ndarray:
    n = draw(st.integers(0, 40))
    t = _table("pci", n)
    start = np.cumsum(draw(hnp.arrays(np.int64, n, elements=st.integers(0, 3000))))
    t["t_ns"] = start
    t["t_end_ns"] = start + draw(hnp.arrays(np.int64, n, elements=st.integers(0, 2000)))
    t["kind"] = draw(hnp.arrays("S8", n, elements=st.sampled_from([b"csr", b"dma", b"msi", b"unknown"])))
    t["command"] = draw(hnp.arrays("S32", n, elements=st.sampled_from([b"", b"Memory Read", b"Memory Write"])))
    t["termination"] = draw(hnp.arrays("S24", n, elements=st.sampled_from([b"normal", b"retry",
                                                                          b"disconnect_with_data"])))
    t["data_phases"] = draw(hnp.arrays(np.int32, n, elements=st.integers(0, 300)))
    t["bytes"] = draw(hnp.arrays(np.int64, n, elements=st.integers(-1, 2048)))
    t["wide"] = draw(hnp.arrays(bool, n))
    t["target_wait_clocks"] = draw(hnp.arrays(np.int32, n, elements=st.integers(0, 20)))
    return t


@st.composite
def random_capture(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    pci = _random_pci(draw)
    m = draw(st.integers(0, 10))
    irq = _table("irq", m)
    irq["t_ns"] = np.sort(draw(hnp.arrays(np.int64, m, elements=st.integers(0, 100_000))))
    irq["t_end_ns"] = irq["t_ns"] + draw(hnp.arrays(np.int64, m, elements=st.integers(0, 5000)))
    k = draw(st.integers(0, 10))
    eth = _table("ethernet", k)
    eth["t_ns"] = np.sort(draw(hnp.arrays(np.int64, k, elements=st.integers(0, 100_000))))
    eth["t_end_ns"] = eth["t_ns"] + draw(hnp.arrays(np.int64, k, elements=st.integers(0, 12_000)))
    eth["direction"] = draw(hnp.arrays("S2", k, elements=st.sampled_from([b"tx", b"rx"])))
    eth["length"] = draw(hnp.arrays(np.int32, k, elements=st.integers(64, 1518)))
    eth["fcs_ok"] = True
    eth["pause_quanta"] = draw(hnp.arrays(np.int32, k, elements=st.integers(-1, 3)))
    eth["ethertype"] = np.where(eth["pause_quanta"] >= 0, bus.MAC_CONTROL_ETHERTYPE, 0x0800)
    return pci, irq, eth


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_capture())
def test_arbitrary_tables_never_crash(capture):
    pci, irq, eth = capture
    tl = bus.bus_timeline(pci, irq, pci, irq, eth)
    for hb in (tl.send, tl.recv):
        if hb is None:
            continue
        rows = [r for t in hb.activity.transfers for r in t.rows]
        # every transaction that moved data in one transfer; a retried attempt at most in its repeat's
        dma = pci["kind"] == b"dma"
        moved = int((dma & (pci["termination"] != b"retry")).sum())
        assert len(rows) == len(set(rows)) and moved <= len(rows) <= int(dma.sum())
        assert all(t.role in bus.TRANSFER_ROLES for t in hb.activity.transfers)
        assert all(c.role in bus.CLUSTER_ROLES for c in hb.activity.clusters)


def _delayed_reads(probed: bool) -> np.ndarray:
    """A NIC's frame fetch over a bridge that answers reads as delayed transactions (PCI 2.2 3.3.3.3): each
    read it starts is retried (STOP#, no data) and repeated; a writeback of the frame before goes between
    the data's attempt and its repeat. ``probed``: AD and C/BE# recorded, else neither."""
    rows = [(0, 60, 0, b"Memory Read", 0x100, b"retry"), (135, 75, 2, b"Memory Read", 0x100, b"normal"),
            (225, 60, 0, b"Memory Read Multiple", 0x2000, b"retry"), (360, 75, 2, b"Memory Write", 0x80, b"normal"),
            (465, 165, 16, b"Memory Read Multiple", 0x2000, b"normal"),
            (840, 60, 0, b"Memory Read Multiple", 0x2080, b"retry"),
            (975, 165, 16, b"Memory Read Multiple", 0x2080, b"normal")]
    pci = _table("pci", len(rows))
    pci["t_ns"], pci["t_end_ns"] = [r[0] for r in rows], [r[0] + r[1] for r in rows]
    pci["data_phases"], pci["termination"] = [r[2] for r in rows], [r[5] for r in rows]
    pci["kind"], pci["wide"], pci["bytes"] = b"dma", True, -1
    if probed:
        pci["command"], pci["address"], pci["has_address"] = [r[3] for r in rows], [r[4] for r in rows], True
    return pci


@pytest.mark.parametrize("probed", [True, False], ids=["probed", "state-mode"])
def test_a_retried_read_is_part_of_the_read_it_precedes(probed):
    pci = _delayed_reads(probed)
    out = _table("ethernet", 2)
    out["t_ns"], out["t_end_ns"], out["direction"], out["length"] = [-12_000, 1_300], [-800, 13_500], b"tx", 1518
    transfers = bus.bus_activity(pci, frames_in=_table("ethernet", 0), frames_out=out).transfers
    fetch = [t for t in transfers if t.role == "fetch"]
    assert len(fetch) == 1 and fetch[0].rows == (0, 1, 2, 4, 5, 6)
    # the read began at its first attempt; its first word is the first moved
    assert fetch[0].start_ns == 0 and fetch[0].data_start_ns == 465 and fetch[0].bytes == 16 + 256
    assert [t.rows for t in transfers if t.role != "fetch"] == [(3,)]
