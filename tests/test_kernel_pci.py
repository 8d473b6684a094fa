"""The PCI kernel (decoders/_pci_kernel.c) against its reference, the ``pci`` PD, row for row.

Every capture below goes through :mod:`kernel_conformance`: the kernel's table rows must equal the rows of
the PD's ``records`` lines byte for byte, in the PD's order, however the samples are split into blocks and
wherever the batch planner cuts the source. A difference on any row fails. The captures: nicrig's simulated rig (every NIC and bus profile, both scenarios, AD/C/BE#/PAR
recorded or not, state and timing mode), the same captures exported and imported again (.sr and VCD),
bus activity drawn by hypothesis from a PCI 3.0 bus model (legal, then with control lines flipped,
parity errors, GNT# and PERR#, jittered clocks, cut ends, every option), and random bits. The independent
Verilog model's captures are checked in ``test_independent_models.py``; sigrok-cli's tables against the
builtin engine's in ``test_decode_truth.py``.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import simulate_set
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kernel_conformance import check_capture, check_rows, peak_memory
from nicrig.acquisition.capture import CaptureSet
from nicrig.acquisition.sim.rig import Recording
from nicrig.decoders import builtin, kernels, runtime
from pcibus import CH32, CH64, CH_CTRL, IDS, Bus

NICS = ("alteon-acenic", "generic", "intel-pro1000", "sk9843")
BUSES = ("pci32-33", "pci64-33", "pci64-66", "pcix64-133")
RECORDINGS = (Recording(with_ad=True), Recording(), Recording(with_ad=True, samples_per_clock=3),
              Recording(samples_per_clock=5))
TERMS = ("normal", "normal", "retry", "disconnect_with_data", "disconnect_without_data", "target_abort")
CONTROL = 5  # FRAME#, IRDY#, TRDY#, DEVSEL#, STOP#: the first five columns of every channel list


def _pack(levels: np.ndarray) -> np.ndarray:
    return np.packbits(np.asarray(levels, np.uint8), axis=1, bitorder="little")


def _call(columns: list[str], options: dict[str, str], alias: dict[str, str] | None = None) -> runtime.Call:
    """The pci decoder on ``columns`` (channel k in row bit k); ``alias`` maps extra decoder channels onto
    the column of another (two decoder channels on one line)."""
    channels = {IDS[name]: k for k, name in enumerate(columns) if name in IDS}
    for decoder_channel, name in (alias or {}).items():
        channels[decoder_channel] = columns.index(name)
    return runtime.Call("pci", channels, options)


def _edges(periods: np.ndarray) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(periods)])


def _jittered_timing(levels: np.ndarray, periods: np.ndarray, tco: int) -> np.ndarray:
    """Per-clock levels -> samples with a leading CLK column; clock k lasts ``periods[k]`` samples, rising
    at its start; the lines change ``tco`` samples after each rising edge (0: on the edge sample)."""
    edges = _edges(periods)
    n = int(edges[-1])
    j = np.arange(n)
    clock = np.searchsorted(edges, j, side="right") - 1
    out = np.empty((n, levels.shape[1] + 1), np.uint8)
    out[:, 0] = (j - edges[clock]) < (periods[clock] + 1) // 2
    on_lines = np.searchsorted(edges + tco, j, side="right") - 1
    out[:, 1:] = levels[np.clip(on_lines, 0, len(levels) - 1)]
    return out


# -- nicrig's simulated rig, and the same captures imported again -----------------------------------------

def _matrix() -> list[tuple[str, str, str, Recording]]:
    """Every NIC on every bus; scenario and recording vary so that each NIC and each bus sees all of them."""
    cases = []
    for i, nic in enumerate(NICS):
        for j, bus in enumerate(BUSES):
            kind = ("latency", "stream")[(i + j) % 2]
            cases.append((nic, bus, kind, RECORDINGS[(i + 2 * j) % len(RECORDINGS)]))
    return cases


@pytest.mark.parametrize("nic,bus,kind,recording", _matrix(),
                         ids=lambda v: v if isinstance(v, str) else
                         f"{'ad' if v.with_ad else 'ctl'}-{v.samples_per_clock or 'state'}")
def test_simulated_rig(tmp_path, nic, bus, kind, recording):
    size = 3000 if kind == "latency" else 1400
    path = simulate_set(tmp_path, "sim", nic=nic, bus=bus, recording=recording, kind=kind, size_bytes=size,
                        count=3, spacing_us=12)
    for source in ("send_pci", "recv_pci"):
        checked = check_capture(path, source, outputs=["pci"])
        assert sum(checked.values()) >= 10


@pytest.fixture(scope="module")
def timing_capture(tmp_path_factory) -> Path:
    """SK-9843 on 32/33 (retries, disconnects), 4 samples a clock, AD/C/BE#/PAR recorded."""
    return simulate_set(tmp_path_factory.mktemp("kimport"), "sk", nic="sk9843", bus="pci32-33",
                        recording=Recording(with_ad=True, samples_per_clock=4), kind="stream",
                        size_bytes=1000, spacing_us=15, count=5)


def _nicrig(*args: object) -> None:
    r = subprocess.run([sys.executable, "-m", "nicrig", *map(str, args)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("suffix", [".sr", ".vcd"])
def test_exported_and_imported_captures(timing_capture, tmp_path, suffix):
    """A capture exported as a sigrok session or a VCD and imported again: the rows a user decodes."""
    exported = tmp_path / f"send{suffix}"
    _nicrig("export", timing_capture, "--source", "send_pci", "-o", exported)
    imported = tmp_path / "imported.h5"
    _nicrig("import", exported, "-o", imported, "--source", "send_pci")
    with CaptureSet.open(imported) as cs:
        assert cs.source("send_pci").mode == "timing"
    stack = ("pci:clk=CLK:frame=FRAME#:irdy=IRDY#:trdy=TRDY#:devsel=DEVSEL#:stop=STOP#:ad=AD:cbe=C/BE#:par=PAR"
             ":gnt=GNT#:clock=clk")
    checked = check_capture(imported, "send_pci", stacks=[stack])
    assert sum(checked.values()) > 50


# -- the engines ---------------------------------------------------------------------------------------------

def test_builtin_engine_runs_the_kernel_and_equals_the_reference_engine(timing_capture, tmp_path):
    """nicrig decode: the kernel (chunked, two workers) writes the very table the PDs write in-process."""
    tables, engines = {}, {}
    for engine, extra in (("reference", ()), ("builtin", ("--workers", "2", "--chunk-samples", "4096"))):
        path = tmp_path / f"{engine}.h5"
        shutil.copy(timing_capture, path)
        _nicrig("decode", path, "--source", "send_pci", "--engine", engine, *extra)
        with CaptureSet.open(path) as cs:
            tables[engine] = cs.read_table("decoded/send_pci/pci")
            engines[engine] = cs.table_attrs("decoded/send_pci/pci")["engine"]
    assert len(tables["builtin"]) > 50
    assert tables["builtin"].tobytes() == tables["reference"].tobytes()
    assert "pci: kernel nicrig.decoders.pci_kernel:PciKernel" in engines["builtin"]
    assert "reference" in engines["reference"] and "pci: pd pci" in engines["reference"]


def test_annotations_come_from_the_pd_and_its_table_is_the_kernels(timing_capture):
    """Kernels make table rows only: annotations come from the PD, whose records give the kernel's table."""
    from nicrig.decoders import spec, tables

    with CaptureSet.open(timing_capture) as cs:
        source = cs.source("send_pci")
        stack = next(s for s in spec.auto_stacks(source) if s.output == "pci")
        seen: list[int] = []
        with_pd = tables.records_to_table("pci", builtin.run_stack(source, stack,
                                                                   on_annotation=lambda *a: seen.append(a[3])), source)
        (with_kernel,) = builtin.kernel_tables(source, [stack])
    assert seen and len(with_pd) > 50 and with_pd.tobytes() == np.concatenate(with_kernel.pieces).tobytes()


def test_the_kernel_refuses_what_the_runtime_refuses():
    for channels, options, message in (
            ({"frame": 0, "irdy": 1, "trdy": 2}, {}, "required channel(s) devsel not mapped"),
            ({"frame": 0, "irdy": 1, "trdy": 2, "devsel": 3, "bogus": 4}, {}, "no channel(s) bogus"),
            ({"frame": 0, "irdy": 1, "trdy": 2, "devsel": 3}, {"speed": "1"}, "no option(s) speed")):
        calls = [runtime.Call("pci", channels, options)]
        with pytest.raises(runtime.DecoderFailed, match=re.escape(message)):
            runtime.Session(calls, samplerate=1)
        with pytest.raises(runtime.DecoderFailed, match=re.escape(message)):
            kernels.run(calls, [np.zeros((4, 1), np.uint8)], samplerate=1, unitsize=1)
    with pytest.raises(runtime.DecoderFailed, match="outside the 1-byte sample row"):
        kernels.run([runtime.Call("pci", {"frame": 0, "irdy": 1, "trdy": 2, "devsel": 9})],
                    [np.zeros((4, 1), np.uint8)], samplerate=1, unitsize=1)


def test_memory_stays_bounded_by_the_block():
    """Twenty 1 M-row blocks (6 MB each) of sparse bus activity: the kernel keeps no samples, only records."""
    bus = Bus(idle=3)
    bus.txn(0x7, 0x1000, [1, 2, 3], master=True)
    bus.idle(3)
    busy = _pack(bus.levels(CH32))
    burst = np.concatenate([busy, np.repeat(busy[-1:], 50_000 - len(busy), axis=0)])
    block = np.tile(burst, (20, 1))
    assert len(block) == 1_000_000
    kernel = kernels.kernel_for(("pci",))([_call(CH32, {"clock": "state"})], 33_000_000, block.shape[1], 0)
    kernel.feed(block)
    peak = peak_memory(kernel, block, 19)
    assert len(kernel.finish()) == 400
    assert peak < 1 << 20


# -- corners of the PD that random activity rarely reaches ------------------------------------------------------

def _kinds(lines: list[str]) -> list[str]:
    return [json.loads(line)["kind"] for line in lines]


def test_gnt_history_is_the_pds_last_eight_changes():
    """Timing mode, 15 samples a clock: GNT# asserted 20 samples before the address phase's edge, then
    nine changes within the last clock. The PD keeps its last eight GNT# changes, none of which is as old
    as the sample it looks up (one clock before the edge), so it takes GNT# from the clock's own pins:
    deasserted, a CSR access (with the whole history it would have found GNT# asserted: DMA)."""
    bus = Bus(idle=4)
    txn = bus.txn(0x7, 0x100, [1])
    bus.idle(3)
    columns = CH_CTRL + ["GNT#"]
    samples = _jittered_timing(bus.levels(columns), np.full(len(bus.clocks), 15), 1)
    edge = 15 * (txn.ss_clock + 1)  # clock k's levels are on the lines just before rising edge k + 1
    gnt = np.ones(len(samples), np.uint8)
    gnt[edge - 20:] = 0
    for t in range(edge - 10, edge - 1):
        gnt[t:] ^= 1
    samples[:, -1] = gnt
    lines = check_rows([_call(["CLK"] + columns, {})], _pack(samples), 66_000_000)
    assert _kinds(lines) == ["csr"]


def test_an_idle_warning_is_a_clock_the_pd_steps():
    """Timing mode, TRDY# asserted outside the transactions: the first idle clock after a transaction warns
    of it (the address phase forgot the earlier warning), the warning's annotation waits for the next
    clock, so the PD steps one more clock and measures the period there (7 samples, not 4); the next
    transaction's GNT# is then read 8 samples before its edge, where GNT# was asserted: DMA."""
    bus = Bus(idle=4)
    for k in range(4):
        bus.at(k).trdy = True
    first = bus.txn(0x7, 0x100, [1], gap=1)
    bus.idle(6)
    for k in range(first.es_clock + 3):
        bus.at(k).trdy = True
    second = bus.txn(0x6, 0x200, [2])
    bus.idle(3)
    columns = CH_CTRL + ["GNT#"]
    periods = np.full(len(bus.clocks), 4)
    periods[first.es_clock + 1] = 7
    samples = _jittered_timing(bus.levels(columns), periods, 1)
    edge = _edges(periods)[second.ss_clock + 1]
    samples[:, -1] = 1
    samples[edge - 8:edge - 6, -1] = 0
    lines = check_rows([_call(["CLK"] + columns, {})], _pack(samples), 66_000_000)
    assert _kinds(lines) == ["csr", "dma"]


# -- bus activity drawn by hypothesis -------------------------------------------------------------------------

@st.composite
def bus_activity(draw) -> Bus:
    """PCI 3.0 transactions as the spec draws them: every command, DEVSEL# speed, termination, wait states,
    DAC, 64-bit (acknowledged or not), master aborts, fast back-to-back; then parity errors, PERR#,
    GNT# and INTA# on random clocks."""
    bus = Bus(idle=draw(st.integers(1, 3)))
    for _ in range(draw(st.integers(1, 6))):
        n = draw(st.integers(1, 5))
        phases = st.lists(st.sampled_from([0, 0, 0, 1, 2, 3]), min_size=n, max_size=n)
        bus.txn(draw(st.integers(0, 15)), draw(st.integers(0, (1 << 64) - 1)),
                draw(st.lists(st.integers(0, (1 << 64) - 1), min_size=n, max_size=n)),
                be=draw(st.integers(0, 255)), devsel=draw(st.sampled_from([1, 2, 3, 4, None])),
                mwait=draw(phases), twait=draw(phases), term=draw(st.sampled_from(TERMS)),
                term_phase=draw(st.integers(0, n - 1)), dac=draw(st.booleans()), wide=draw(st.booleans()),
                ack64=draw(st.booleans()), master=draw(st.booleans()), gap=draw(st.integers(0, 5)))
    bus.idle(draw(st.integers(0, 4)))
    for k in draw(st.lists(st.integers(0, len(bus.clocks) - 1), max_size=6)):
        clk = bus.clocks[k]
        what = draw(st.sampled_from(["par_flip", "par64_flip", "perr", "gnt", "inta"]))
        setattr(clk, what, not getattr(clk, what))
    return bus


CHANNEL_SETS = {
    "64": CH64,
    "32": CH32,
    "control": CH_CTRL,
    "64-no-perr": [c for c in CH64 if c != "PERR#"],
    "32-no-stop-gnt": [c for c in CH32 if c not in ("STOP#", "GNT#")],
    "64-partial-ad": [c for c in CH64 if c not in ("AD[5]", "AD[40]", "C/BE#[6]")],
    "64-reversed": CH_CTRL + list(reversed(CH64[CONTROL:])),
}


@st.composite
def captures(draw, mutate: bool) -> tuple[np.ndarray, runtime.Call, int]:
    """Packed rows, the pci call on them, and the first sample's number."""
    bus = draw(bus_activity())
    name = draw(st.sampled_from(sorted(CHANNEL_SETS)))
    columns = list(CHANNEL_SETS[name])
    levels = bus.levels(columns)
    if mutate:
        rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
        levels[:, :CONTROL] ^= (rng.random((len(levels), CONTROL)) < draw(st.sampled_from([0.01, 0.05, 0.2])))
    options: dict[str, str] = {}
    mode = draw(st.sampled_from(["state", "clk", "auto", "clk-no-clk", "bogus"]))
    if mode in ("clk", "auto", "bogus"):
        spc = draw(st.integers(2, 6))
        jitter = draw(st.sampled_from([0, 0, 1, 3]))
        rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
        periods = spc + rng.integers(0, jitter + 1, len(levels))
        levels = _jittered_timing(levels, periods, draw(st.integers(0, spc - 1)))
        columns = ["CLK"] + columns
    if mode != "auto":
        options["clock"] = {"state": "state", "clk": "clk", "clk-no-clk": "clk", "bogus": "sampled"}[mode]
    bars = draw(st.sampled_from([None, "", "0x0-0xffffffff", "0x1000+0x100;0x2000-0x2fff",
                                 "0xzz-1; 5-3;0xe800+32", "0-0xfffffffffffffffffffff"]))
    if bars is not None:
        options["bars"] = bars
    msi = draw(st.sampled_from([None, "0x0-0xffffffffffffffff", "x", ""]))
    if msi is not None:
        options["msi"] = msi
    alias = draw(st.sampled_from([None, {"perr": "INTA#"}, {"gnt": "FRAME#"}, {"stop": "CLK"}]))
    if alias and any(name not in columns for name in alias.values()):
        alias = None
    cut_head, cut_tail = draw(st.integers(0, 12)), draw(st.integers(0, 12))
    levels = levels[cut_head:len(levels) - cut_tail]
    if not len(levels):
        levels = bus.levels(CH_CTRL)[:1]
        columns = list(CH_CTRL)
        alias = None
    return _pack(levels), _call(columns, options, alias), draw(st.integers(0, 10**9))


SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                          HealthCheck.data_too_large])


@SETTINGS
@given(captures(mutate=False))
def test_drawn_bus_activity(capture):
    rows, call, start = capture
    check_rows([call], rows, 33_000_000, start=start)


@SETTINGS
@given(captures(mutate=True))
def test_drawn_bus_activity_with_flipped_control_lines(capture):
    rows, call, start = capture
    check_rows([call], rows, 33_000_000, start=start)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 12), st.sampled_from([0.5, 0.1, 0.01]), st.booleans())
def test_random_bits(seed, unitsize, density, with_clock):
    """Random levels on random channel maps (channels sharing lines included)."""
    rng = np.random.default_rng(seed)
    n, nbits = int(rng.integers(1, 3000)), 8 * unitsize
    flips = rng.random((n, nbits)) < density
    levels = (rng.integers(0, 2, nbits) ^ (np.cumsum(flips, axis=0) & 1)).astype(np.uint8)
    if with_clock:
        period = int(rng.integers(2, 6))
        levels[:, 0] = (np.arange(n) % period) < period // 2
    ids = [c["id"] for c in runtime.load("pci").optional_channels]
    channels = {c: int(rng.integers(0, nbits)) for c in ("frame", "irdy", "trdy", "devsel")}
    channels.update({c: int(rng.integers(0, nbits)) for c in ids if rng.random() < 0.5})
    if with_clock:
        channels["clk"] = 0
    rows = _pack(levels)
    check_rows([runtime.Call("pci", channels, {})], rows, 1_000_000, start=int(rng.integers(0, 1000)))
