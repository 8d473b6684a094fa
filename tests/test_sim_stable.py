"""The simulator's output stays byte-identical on fixed seeds while its speed is worked on.

Each case simulates a short run and hashes every ground-truth table and every
source's samples and timestamps. The digests were taken from the model as
calibrated (``bench/calibration.py``); a change that is meant to alter the
model's behaviour changes them and must say so in its commit message, a
change that is only meant to make it faster must not.

The cases cover what the engine's shortcuts (DMA plans, the sources
rendered in blocks by forked workers while the model runs) could get wrong: request-response and streams; a saturated stream
whose receiver sends PAUSE and XON (a NIC with a small receive FIFO, so the
cycles start within a short run); CSR retries (STOP#) and delayed reads of
the host bridge interleaving with the NIC's bursts on one bus (two masters);
32- and 64-bit buses at 33, 66 and 133 MHz, with and without AD/C/BE#, state
and timing mode; and a schedule of points cut short by the recording.
"""

from __future__ import annotations

import gc
import hashlib
import json
import subprocess
import sys
from dataclasses import fields, replace
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import simpy
from nicrig.acquisition.capture import CaptureSet
from nicrig.acquisition.sim import profiles
from nicrig.acquisition.sim.model import (
    CMD_MEMORY_READ,
    BusRecord,
    CsrAccess,
    Rig,
    Point,
    Scenario,
    dma_plan,
    fewer_collections,
)
from nicrig.acquisition.sim import _bus
from nicrig.acquisition.sim.pci_bus import PciTransaction
from nicrig.acquisition.sim.rig import Recording, _JoinedRows, _rows_concatenated, _with_columns, simulate
from nicrig.acquisition.sim.scheduler import Engine, after_timeout

#: (name, profiles, recording, scenario) -> sha256 of the truth tables and the sources, in name order.
CASES = {
    "intel-stream-11us": (dict(nic="intel-pro1000", bus="pci64-66", host="supermicro-370dle"), Recording(),
                          dict(kind="stream", size_bytes=1400, spacing_us=11, count=60, seed=7)),
    "sk-latency-ad-32": (dict(nic="sk9843", bus="pci32-33", host="supermicro-370dle"), Recording(with_ad=True),
                         dict(kind="latency", size_bytes=3000, count=3, seed=3)),
    "alteon-stream-timing": (dict(nic="alteon-acenic", bus="pci64-33", host="ibm-das"),
                             Recording(samples_per_clock=4), dict(kind="stream", size_bytes=900, spacing_us=0,
                                                                   count=40, seed=5)),
    "intel-p4dp6-latency": (dict(nic="intel-pro1000", bus="pci64-66", host="supermicro-p4dp6"), Recording(),
                            dict(kind="latency", size_bytes=64, count=4, seed=11)),
    "intel-stream-pause": (dict(nic="intel-pro1000", bus="pci64-66", host="supermicro-370dle"), Recording(),
                           dict(kind="stream", size_bytes=1400, spacing_us=11, count=120, seed=13)),
    "sk-stream-64-retries": (dict(nic="sk9843", bus="pci64-66", host="supermicro-370dle"), Recording(with_ad=True),
                             dict(kind="stream", size_bytes=1472, spacing_us=0, count=40, seed=17)),
    "intel-p4dp6-stream": (dict(nic="intel-pro1000", bus="pci64-66", host="supermicro-p4dp6"),
                           Recording(with_ad=True), dict(kind="stream", size_bytes=1400, spacing_us=11, count=60,
                                                         seed=19)),
    "generic-pcix-schedule": (dict(nic="generic", bus="pcix64-133", host="supermicro-p4dp8-g2"),
                              Recording(messages=6), dict(kind="stream", size_bytes=1000, count=1, seed=23,
                                                          schedule=(Point(200, 5, 5.0),
                                                                    Point(3000, 4, 20.0, position=1)))),
}
#: Profile changes of a case: so few receive descriptors (and so small a FIFO) that the receiver's FIFO
#: fills between two interrupt services and PAUSE/XON cycles start within a short run.
NIC_CHANGES = {
    "intel-stream-pause": dict(rx_ring=8, rx_fifo_bytes=16384, fc_high_water_bytes=8192, fc_low_water_bytes=4096),
}
#: Counters (``RigRun.counters``) a case must show at least twice to cover what it is there for.
EXERCISES = {"intel-stream-pause": ("recv_pause_sent", "recv_xon_sent")}
DIGESTS = {
    "intel-stream-11us": "aac4610a4791b1a3cb2e5cf140603f1884b318b59e184c420cba7de3ed3dbe94",
    "sk-latency-ad-32": "10328a2322791953e8c5d3d33e08a1259479402f38b87373a5fc24e92433429f",
    "alteon-stream-timing": "c7940c3c5b9de3d2470a0d949a3e5135d2aa78cb02756172db66fa3ae9e3262e",
    "intel-p4dp6-latency": "54f105ff30061e1a267dfdae4621fbd0549b635fe338b9e36e57255f801439e3",
    "intel-stream-pause": "f47e93bb8581b6b742d978b8f1c54339594439deed2338e0e8168f466e2b2658",
    "sk-stream-64-retries": "0c60ca89c205ef3cfc5b008319ce08830156af96563e387026c899e4b5917ff7",
    "intel-p4dp6-stream": "fa565f9074102d2e3fdaac1deefdb207c5ee07b151ca2e554028e7d8537788d6",
    "generic-pcix-schedule": "cd0f335b841b8d292b3c414dc30cb0f5e1e5377a931915af8acc53df2cbf0514",
}


def digest(path: Path) -> str:
    """SHA-256 over every truth table and every source's packed samples and timestamps, by name."""
    h = hashlib.sha256()
    with CaptureSet.open(path) as cs:
        for name in sorted(n for n in cs.table_names() if n.startswith("truth/")):
            h.update(name.encode())
            h.update(cs.read_table(name).tobytes())
        for name, src in sorted(cs.sources.items()):
            h.update(name.encode())
            h.update(src.read_packed().tobytes())
            if src.mode == "state":
                h.update(src.times_ps().tobytes())
    return h.hexdigest()


def simulate_case(case: str, folder: Path, **how: int) -> tuple[Path, dict[str, int]]:
    """Simulate ``case`` into ``folder`` (``how``: ``workers``, ``block_clocks`` of :func:`simulate`); return
    the capture set and the run's counters."""
    names, recording, scenario = CASES[case]
    out = folder / f"{case}.h5"
    nic = replace(profiles.load("nic", names["nic"]), **NIC_CHANGES.get(case, {}))
    run, _ = simulate(Scenario(**scenario), profiles.load("bus", names["bus"]), nic,
                      profiles.load("host", names["host"]), out, recording, **how)
    return out, run.counters


@pytest.mark.parametrize("case", sorted(CASES))
def test_simulated_capture_is_byte_identical_to_the_calibrated_model(case, tmp_path):
    path, counters = simulate_case(case, tmp_path)
    assert digest(path) == DIGESTS[case]
    # The flow-control case really has PAUSE/XON cycles, else its digest would guard nothing of them.
    for counter in EXERCISES.get(case, ()):
        assert counters[counter] >= 2, counter


@pytest.mark.parametrize("case", ["intel-stream-pause", "sk-latency-ad-32", "alteon-stream-timing"])
@pytest.mark.parametrize("workers", [1, 3])
def test_the_sources_are_the_same_rendered_here_or_in_workers(case, workers, tmp_path):
    """The sources rendered here after the model, or in forked workers (the default on a machine with two
    CPUs, which the cases above take): the capture set is the same."""
    path, _ = simulate_case(case, tmp_path, workers=workers)
    assert digest(path) == DIGESTS[case]


def _blocks_handed_out_while_the_model_runs(monkeypatch) -> list[tuple[str, int, int]]:
    """The blocks ``(source, c0, c1)`` the renderer will hand to forked workers while the model runs (as it goes)."""
    from nicrig.acquisition.sim import forked

    handed = []
    submit = forked.ForkPool.submit

    def noting(pool, tasks, work):
        tasks = list(tasks)
        if not work.args[1]:  # _encoded_task(sources, final, task): blocks of the run still going
            handed.extend(tasks)
        submit(pool, tasks, work)

    monkeypatch.setattr(forked.ForkPool, "submit", noting)
    return handed


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("workers", [1, 2])
def test_the_sources_are_the_same_rendered_in_small_blocks(case, workers, tmp_path, monkeypatch):
    """Blocks of 4096 clocks, each rendered from the transactions and frames that reach into it, and, with
    a worker, handed to it every 20 us of simulated time while the model runs (all but the cut recording):
    the capture set is the one rendered whole."""
    from nicrig.acquisition.sim import rig

    monkeypatch.setattr(rig, "CHECKPOINT_PS", 20_000_000)
    while_running = _blocks_handed_out_while_the_model_runs(monkeypatch)
    path, _ = simulate_case(case, tmp_path, workers=workers, block_clocks=4096)
    assert digest(path) == DIGESTS[case]
    cut_short = 0 < CASES[case][1].messages < sum(p.count for p in Scenario(**CASES[case][2]).points())
    assert bool(while_running) == (workers > 1 and not cut_short)


def test_a_recording_of_every_message_is_rendered_while_the_model_runs(tmp_path, monkeypatch):
    """A recording of as many messages as the run sends (nicrig simulate's default --capture-count 2000 of a
    shorter run) is the whole run: its blocks go to a worker while the model runs, as with 0, and the sources
    and tables are the whole run's."""
    from nicrig.acquisition.sim import rig

    monkeypatch.setattr(rig, "CHECKPOINT_PS", 20_000_000)
    while_running = _blocks_handed_out_while_the_model_runs(monkeypatch)
    names, _, scenario = CASES["intel-stream-11us"]
    out = tmp_path / "all.h5"
    simulate(Scenario(**scenario), profiles.load("bus", names["bus"]), profiles.load("nic", names["nic"]),
             profiles.load("host", names["host"]), out, Recording(messages=scenario["count"]), workers=2,
             block_clocks=4096)
    assert while_running
    assert digest(out) == DIGESTS["intel-stream-11us"]


def test_no_block_handed_out_while_the_model_runs_lies_past_the_recordings_end(tmp_path, monkeypatch):
    """The model's last checkpoint comes after its last event, up to a checkpoint period later and so past
    the recording's end (its last event and the tail): the blocks handed out at each checkpoint lie within
    the recording, its last block rendered once its end is known."""
    from nicrig.acquisition.sim import forked, rig

    monkeypatch.setattr(rig, "CHECKPOINT_PS", 300_000_000)  # the last checkpoint up to 300 us past the last event
    monkeypatch.setattr(forked.ForkPool, "running", property(lambda pool: 0))  # blocks at every checkpoint
    while_running = _blocks_handed_out_while_the_model_runs(monkeypatch)
    path, _ = simulate_case("intel-stream-11us", tmp_path, workers=3, block_clocks=4096)
    assert digest(path) == DIGESTS["intel-stream-11us"]
    with CaptureSet.open(path) as cs:  # state mode: a sample a clock
        clocks = {name: cs.source(name).num_samples for name in ("send_pci", "recv_pci", "probe")}
    assert while_running
    past = [(name, c0, c1) for name, c0, c1 in while_running if c1 > clocks[name]]
    assert not past, f"{len(past)} blocks past the recording's end, the first {past[0]}"


def _run_process(env: Engine, generator) -> None:
    env.process(generator)
    env.run()


def test_a_delayed_read_is_retried_until_its_data_is_there_each_attempt_a_copy_of_its_template():
    """``_bus.register_access``: a read whose data takes the NIC ``read_latency_ps`` from the first attempt it
    takes is refused (STOP#) until then, attempted again ``retry_ps`` after each refused attempt's end, at the
    bus's next clock edge; every attempt is the template's fields (its arrays shared), ended "retry" or
    "normal"; the access's Later ends with the attempt that completes."""
    env = Engine()
    bus = BusRecord(profiles.load("bus", "pci64-66"), 0)
    template = PciTransaction(start_clk=3, command=CMD_MEMORY_READ, address=0xFE000008,
                              data=np.array([8], np.uint64), byte_enables=np.array([0xF], np.uint8),
                              target_waits=np.array([8]), master_waits=np.array([1]), devsel=2, termination="retry",
                              wide=True, master="host", parity_error_phases=(0,), kind="csr")
    shape = CsrAccess(False, template, busy=12, busy_retry=5)
    host = SimpleNamespace(csr_ready_ps=0)
    latency_ps, retry_ps = 200_000, 30_000
    ended = []

    def read():
        yield _bus.register_access(env, bus, host, shape, 0, True, latency_ps, retry_ps)
        ended.append(env.now)

    _run_process(env, read())
    attempts = bus.transactions
    assert [t.termination for t in attempts] == ["retry"] * (len(attempts) - 1) + ["normal"] and len(attempts) > 2
    assert bus.purposes == ["csr_retry"] * (len(attempts) - 1) + ["csr"] and bus.wide == list(range(len(attempts)))
    for t in attempts:
        assert t is not template
        for f in fields(PciTransaction):
            if f.name not in ("start_clk", "termination"):
                assert getattr(t, f.name) is getattr(template, f.name), f.name
    assert attempts[0].start_clk == 0
    for before, t in zip(attempts, attempts[1:]):
        assert t.start_clk == bus.clock_at_or_after(bus.time_of(before.start_clk + 5) + retry_ps)
    assert bus.time_of(attempts[-2].start_clk) < latency_ps <= bus.time_of(attempts[-1].start_clk)
    assert ended == [bus.time_of(attempts[-1].start_clk + 12)]


def test_a_write_is_retried_as_often_as_the_nic_refuses_writes_and_while_it_recovers():
    """``_bus.register_access`` of a write: refused ``retries`` times whatever the time, and while the NIC still
    recovers from its access before (``host.csr_ready_ps``); on a bus another master holds, at the clock it
    frees."""
    for retries, ready_ps, expected in ((2, 0, 3), (0, 100_000, None)):
        env = Engine()
        bus = BusRecord(profiles.load("bus", "pci64-66"), 0)
        bus.free_clk = 4
        template = PciTransaction(0, 0x7, 0x3818, np.array([0x3818], np.uint64), np.array([0xF], np.uint8),
                                  master="host", kind="csr")
        done = []

        def write():
            yield _bus.register_access(env, bus, SimpleNamespace(csr_ready_ps=ready_ps),
                                       CsrAccess(True, template, 4, 3), retries, False, 0, 10_000)
            done.append(env.now)

        _run_process(env, write())
        starts = [bus.time_of(t.start_clk) for t in bus.transactions]
        assert bus.transactions[0].start_clk == 4
        if expected is not None:
            assert len(starts) == expected
        else:
            assert starts[-2] < ready_ps <= starts[-1]
        assert [t.termination for t in bus.transactions][-1] == "normal"
        assert done == [bus.time_of(bus.transactions[-1].start_clk + 4)]


def test_a_dmas_bursts_arbitrate_on_an_idle_bus_and_follow_each_other_after_the_nics_gap():
    """``_bus.bursts``: each burst claims the bus at its next clock edge after arbitration (the NIC masters it),
    the next one the NIC's gap after it ends; its data are its phases of the transfer's words; the DMA's
    Later ends with the last burst."""
    env = Engine()
    bus = BusRecord(profiles.load("bus", "pci64-66"), 0)
    plan = dma_plan(600, 0, write=False, width_bits=64, nic_burst=256, host_cut=4096, initial_wait=2,
                    master_wait_every=0)
    payload = bytes(range(200)) * 3
    words = np.frombuffer(payload, "<u8").astype(np.uint64)
    gap_ps = 45_000
    ended = []

    def fetch():
        yield _bus.bursts(env, bus, plan, 0x1000, words, "tx_data", gap_ps, True)
        ended.append(env.now)

    with pytest.raises(RuntimeError, match="made by the Process"):
        _bus.bursts(env, bus, plan, 0x1000, words, "tx_data", gap_ps, True)
    assert not bus.transactions
    _run_process(env, fetch())
    assert len(bus.transactions) == len(plan) == 3 and bus.purposes == ["tx_data"] * 3 and bus.wide == [0, 1, 2]
    previous_end = 0
    for k, (t, burst) in enumerate(zip(bus.transactions, plan)):
        due = previous_end + (gap_ps if k else 0)
        assert t.start_clk == bus.clock_at_or_after(due) + bus.arbitration_clocks
        assert t.address == 0x1000 + burst.offset and t.master == "nic" and t.kind == "dma" and t.devsel == 2
        assert np.array_equal(t.data, words[burst.phases]) and t.byte_enables is burst.byte_enables
        previous_end = bus.time_of(t.start_clk + burst.busy)
    assert ended == [previous_end]


def test_a_delayed_read_bridge_retries_each_read_the_nic_starts_and_lets_a_read_it_cut_go_on():
    """``dma_plan``'s ``read_retries``: a retried attempt (STOP#, one data phase not taken) before the DMA's first
    read and before each read after a burst the NIC ended, none before the rest of a read the bridge cut at its
    boundary, none on writes; the transfer's bytes and the reads' waits as without retries."""
    shape = dict(width_bits=64, nic_burst=128, host_cut=256, initial_wait=1, master_wait_every=0)
    plain = dma_plan(300, 200, write=False, **shape)
    plan = dma_plan(300, 200, write=False, read_retries=2, **shape)
    assert [b.termination for b in plain] == ["disconnect_with_data", "normal", "normal", "normal"]
    assert [b.termination for b in plan] == ["retry", "retry", "disconnect_with_data", "normal", "retry", "retry",
                                            "normal", "retry", "retry", "normal"]
    retried = [b for b in plan if b.termination == "retry"]
    assert [b.offset for b in retried] == [0, 0, 128, 128, 256, 256]
    assert all(b.length == 8 and b.phases.stop - b.phases.start == 1 and b.busy < plain[0].busy for b in retried)
    assert [(b.offset, b.length, b.busy) for b in plan if b.termination != "retry"] == \
        [(b.offset, b.length, b.busy) for b in plain]
    writes = [dma_plan(300, 200, write=True, read_retries=r, **shape) for r in (0, 2)]
    assert [[(b.offset, b.length, b.termination, b.busy) for b in w] for w in writes][0] == \
        [(b.offset, b.length, b.termination, b.busy) for b in writes[1]]


def test_no_full_collection_in_the_run_and_the_thresholds_as_before_after_it_even_on_error():
    before = gc.get_threshold()
    with pytest.raises(RuntimeError), fewer_collections():
        young, middle, oldest = gc.get_threshold()
        assert young >= max(before[0], 100_000) and middle == before[1] and oldest > 10**9
        raise RuntimeError("a model error")
    assert gc.get_threshold() == before


def _tie_order(start) -> list[str]:
    """The order in which four things due at the same instant happen, ``start(env, delay, then)`` making one
    of them, among processes started and a timeout made at the same moment around it."""
    env = Engine()
    log: list[str] = []

    def waits(name: str):
        yield env.timeout(5)
        log.append(name)

    env.process(waits("process started before"))
    start(env, 5, lambda: log.append("it"))
    env.timeout(5).callbacks.append(lambda _: log.append("timeout made after"))
    env.process(waits("process started after"))
    env.run()
    return log


def test_a_timeout_and_a_call_after_it_keep_the_order_of_the_process_they_replace():
    def as_process(env, delay, then):
        def one_step():
            yield env.timeout(delay)
            then()
        env.process(one_step())

    expected = _tie_order(as_process)
    assert expected == ["timeout made after", "process started before", "it", "process started after"]
    assert _tie_order(lambda env, delay, then: after_timeout(env, lambda: delay, then)) == expected


def test_a_queued_call_keeps_the_order_of_the_timeout_it_replaces():
    def as_timeout(env, delay, then):
        env.timeout(delay).callbacks.append(lambda _: then())

    expected = _tie_order(as_timeout)
    assert expected == ["it", "timeout made after", "process started before", "process started after"]
    assert _tie_order(lambda env, delay, then: env.call_in(delay, then)) == expected
    with pytest.raises(ValueError, match="negative delay"):
        Engine().call_in(-1, lambda: None)


def test_the_engine_runs_events_as_simpy_does_until_a_time_and_on_a_failure():
    env = Engine()
    seen: list[int] = []

    def ticks():
        while True:
            yield env.timeout(3)
            seen.append(env.now)

    env.process(ticks())
    env.call_in(4, lambda: seen.append(-env.now))
    env.run(until=10)
    assert seen == [3, -4, 6, 9] and env.now == 10

    def fails():
        yield env.timeout(1)
        raise KeyError("model fault")

    env.process(fails())
    with pytest.raises(KeyError, match="model fault"):
        env.run()


def test_advance_runs_what_is_due_before_its_bound_in_steps_order():
    def scripted(env: Engine, log: list) -> None:
        def ticks():
            while True:
                yield env.timeout(3)
                log.append(("tick", env.now))

        env.process(ticks())
        for t in (0, 4, 6, 6, 12):
            env.call_in(t, lambda t=t: log.append(("call", env.now, t)))

    stepped, advanced = [], []
    a, b = Engine(), Engine()
    scripted(a, stepped)
    scripted(b, advanced)
    while a.peek() < 9:
        a.step()
    b.advance(9)
    assert advanced == stepped and b.now == a.now == 6 and b.peek() == a.peek() == 9
    assert ("call", 12, 12) not in advanced


@pytest.mark.parametrize("align", [False, True])
def test_columns_appended_keep_every_field_of_a_table_padded_or_packed(align: bool):
    table = np.zeros(5, dtype=np.dtype([("ss", "<i8"), ("kind", "S3"), ("wide", "?"), ("n", "<i4")], align=align))
    table["ss"], table["kind"], table["wide"], table["n"] = np.arange(5) * 10**12, b"dma", [1, 0, 1, 0, 1], -7
    out = _with_columns(table, t_ps=np.arange(5, dtype=np.int64), purpose=np.array([b"csr"] * 5, dtype="S20"))
    assert out.dtype.names == (*table.dtype.names, "t_ps", "purpose")
    for name in table.dtype.names:
        assert (out[name] == table[name]).all(), name
    assert (out["t_ps"] == np.arange(5)).all() and (out["purpose"] == b"csr").all()
    assert len(_with_columns(table[:0], t_ps=np.zeros(0, np.int64))) == 0


@pytest.mark.parametrize("align", [False, True])
def test_tables_concatenated_as_rows_are_numpys_concatenation(align: bool):
    dtype = np.dtype([("ss", "<i8"), ("kind", "S3"), ("wide", "?"), ("n", "<i4")], align=align)
    parts = [np.zeros(k, dtype=dtype) for k in (3, 0, 4)]
    for i, part in enumerate(parts):
        part["ss"], part["kind"], part["wide"], part["n"] = np.arange(len(part)) + 10 * i, b"dm%d" % i, i % 2, -i
    whole = _rows_concatenated([parts[0], parts[1], parts[2][::2]])  # a strided part is copied first
    expected = np.concatenate([parts[0], parts[1], parts[2][::2]])
    assert whole.dtype == dtype and len(whole) == 5
    for name in dtype.names:
        assert (whole[name] == expected[name]).all(), name
    with pytest.raises(TypeError, match="different dtypes"):
        _rows_concatenated([parts[0], np.zeros(2, dtype=[("ss", "<i8")])])


def test_rows_joined_as_they_come_fill_the_table_they_were_counted_for():
    """A bus's table is filled block by block into the rows its transactions were counted for: more rows than
    counted, or fewer once all are in, is an error, not a table cut short or padded."""
    dtype = np.dtype([("ss", "<i8"), ("kind", "S3")])
    joined = _JoinedRows(5)
    joined.add(np.array([(1, b"a"), (2, b"b")], dtype))
    with pytest.raises(ValueError, match="2 rows joined into a table of 5"):
        joined.joined()
    joined.add(np.array([(3, b"c"), (0, b"x"), (4, b"d"), (0, b"x"), (5, b"e")], dtype)[::2])  # strided
    assert joined.joined()["ss"].tolist() == [1, 2, 3, 4, 5] and joined.joined()["kind"][4] == b"e"
    with pytest.raises(ValueError, match="6 rows joined into a table of 5"):
        joined.add(np.zeros(1, dtype))


def test_the_run_freezes_what_it_made_at_each_checkpoint_and_thaws_it_after():
    rig = Rig(Scenario(kind="stream", size_bytes=1400, spacing_us=11, count=400, seed=7),
              profiles.load("bus", "pci64-66"), profiles.load("nic", "intel-pro1000"),
              profiles.load("host", "supermicro-370dle"))
    frozen: list[int] = []
    rig.run(checkpoint=lambda t_ps: frozen.append(gc.get_freeze_count()), every_ps=1_000_000_000)
    assert len(frozen) >= 4 and all(n > 0 for n in frozen) and frozen == sorted(frozen)
    assert gc.get_freeze_count() == 0


def test_bench_model_fingerprints_a_run_and_says_when_they_differ(tmp_path: Path):
    script = Path(__file__).parent.parent / "bench" / "model.py"
    saved = tmp_path / "fp.json"
    run = subprocess.run([sys.executable, str(script), "pcix-sched", "--save", str(saved), "--checkpoints"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    fingerprint = json.loads(saved.read_text())["pcix-sched"]
    assert len(fingerprint) == 64
    again = subprocess.run([sys.executable, str(script), "pcix-sched", "--expect", str(saved), "--json"],
                           capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and json.loads(again.stdout)["expected"] == "same", again.stderr
    saved.write_text(json.dumps({"pcix-sched": "0" * 64}))
    wrong = subprocess.run([sys.executable, str(script), "pcix-sched", "--expect", str(saved)],
                           capture_output=True, text=True, timeout=300)
    assert wrong.returncode == 1 and "DIFFERS" in wrong.stdout and "pcix-sched" in wrong.stderr
