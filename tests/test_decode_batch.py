"""Batch decoding: chunks cut at idle points equal one pass; workers, Dask, skip/force, failures, interrupts."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
from conftest import as_from_a_shell, simulate_set
from nicrig.acquisition.capture import CaptureSet
from nicrig.acquisition.sim.rig import Recording
from nicrig.decoders import batch, spec

OUTPUTS = ("pci", "irq", "ethernet", "linkactivity")


@pytest.fixture(scope="module")
def stream(tmp_path_factory) -> Path:
    """1000-byte packets every 25 us on 32-bit 33 MHz PCI: long DMA bursts with retries and disconnects, and the
    sender idle between them (at 15 us its register accesses and DMA leave the bus no idle stretch)."""
    folder = tmp_path_factory.mktemp("batch")
    return simulate_set(folder, "stream", nic="sk9843", bus="pci32-33", recording=Recording(with_ad=True),
                        kind="stream", size_bytes=1000, spacing_us=25, count=60)


def _tables(path: Path) -> dict[str, bytes]:
    with CaptureSet.open(path) as cs:
        return {t: cs.read_table(t).tobytes() for t in cs.table_names() if t.startswith("decoded/")}


def _copy(src: Path, dst: Path) -> Path:
    dst.write_bytes(src.read_bytes())
    return dst


@pytest.fixture(scope="module")
def single_pass(stream, tmp_path_factory) -> dict[str, bytes]:
    path = _copy(stream, tmp_path_factory.mktemp("single") / "single.h5")
    (result,) = batch.decode_files([path], chunk_samples=1 << 40)
    assert result.error is None
    return _tables(path)


def test_chunk_cuts_fall_between_transactions_where_naive_cuts_would_not(stream):
    chunk = 3000
    with CaptureSet.open(stream) as cs:
        source = cs.source("send_pci")
        truth = cs.read_table("truth/send_pci/transactions")
        (stack,) = [s for s in spec.auto_stacks(source) if s.output == "pci"]
        chunks = batch.plan_chunks(source, stack, chunk)
    inside = lambda t: bool(np.any((truth["ss"] <= t) & (t <= truth["es"])))  # noqa: E731
    naive = range(chunk, chunks[-1][3], chunk)
    assert len(chunks) > 5
    assert any(inside(t) for t in naive), "the capture must punish cuts chosen blindly"
    cuts = [c[2] for c in chunks[1:]]
    assert not any(inside(t) for t in cuts)
    assert [c[3] for c in chunks[:-1]] == cuts
    for start, stop, lo, hi in chunks:
        assert start <= lo < hi <= stop


def test_a_line_that_never_moves_is_not_decoded_again_for_every_chunk(stream):
    """The stream's return direction carries nothing: its stack starts at each cut (nothing before it to warm
    up over) and stops a few clocks after the next, so the chunks together read the source about once."""
    with CaptureSet.open(stream) as cs:
        source = cs.source("probe")
        stacks = spec.auto_stacks(source)
        rows = source.read_packed()
        chunks = batch.plan_source(source, stacks, 3000)
    rx_dv = (rows[:, source.channel_index("RX_DV") >> 3] >> (source.channel_index("RX_DV") & 7)) & 1
    assert not rx_dv.any() and len(chunks) > 10
    (rx,) = [i for i, s in enumerate(stacks) if s.calls[0].channels.get("en") == "RX_DV"]
    assert sum(b - a for a, b in (c.spans[rx] for c in chunks)) < 1.1 * source.num_samples


@pytest.mark.parametrize("workers", [1, 2])
def test_chunked_decode_equals_a_single_pass(stream, single_pass, tmp_path, workers):
    path = _copy(stream, tmp_path / "chunked.h5")
    (result,) = batch.decode_files([path], workers=workers, chunk_samples=3000)
    assert result.error is None
    chunked = _tables(path)
    assert set(chunked) == set(single_pass) and {t.rsplit("/", 1)[1] for t in chunked} >= set(OUTPUTS)
    for name in single_pass:
        assert chunked[name] == single_pass[name], name


@pytest.fixture(scope="module")
def saturated(tmp_path_factory) -> Path:
    """1400-byte UDP every 11 us from a PRO/1000 on PCI 64/66: more than the link carries, so the GMII
    transmit side is frames back to back with the minimum 12-octet gap (bench/decode.py's traffic)."""
    return simulate_set(tmp_path_factory.mktemp("saturated"), "saturated", nic="intel-pro1000", bus="pci64-66",
                        recording=Recording(with_ad=True), kind="stream", size_bytes=1400, spacing_us=11, count=40)


@pytest.fixture(scope="module")
def fragmented(tmp_path_factory) -> Path:
    """3000-byte datagrams over a 1500-byte MTU: three IPv4 fragments each, back to back, the later two
    taking the first one's nicrig sequence number from the ethernet decoder's table."""
    return simulate_set(tmp_path_factory.mktemp("fragmented"), "fragmented", nic="intel-pro1000", bus="pci64-66",
                        kind="stream", size_bytes=3000, spacing_us=40, count=12)


def _tx_stack(source) -> spec.Stack:
    (stack,) = [s for s in spec.auto_stacks(source) if s.output == "ethernet"
                and s.calls[0].options.get("direction") == "tx"]
    return stack


def test_a_saturated_link_is_cut_at_its_inter_frame_gaps(saturated):
    """The kernel's plan cuts back-to-back frames at 12-octet gaps, never inside a frame; the PDs' plan
    (64 quiet clocks) finds hardly a gap on this link (one, after the last frames)."""
    with CaptureSet.open(saturated) as cs:
        source = cs.source("probe")
        stack = _tx_stack(source)
        frames = cs.read_table("truth/probe/frames")
        frames = frames[frames["direction"] == b"tx"]
        kernel_plan = batch.plan_chunks(source, stack, 20_000)
        pd_plan = batch.plan_chunks(source, stack, 20_000, "reference")
        rows = source.read_packed()
        en = (rows[:, source.channel_index("TX_EN") >> 3] >> (source.channel_index("TX_EN") & 7)) & 1
    assert len(pd_plan) <= 2
    assert len(kernel_plan) > source.num_samples // 40_000
    cuts = [c[2] for c in kernel_plan[1:]]
    assert not any(((frames["ss"] <= t) & (t <= frames["es"])).any() for t in cuts)
    for start, stop, lo, hi in kernel_plan:
        assert start <= lo < hi <= stop
        assert en[lo] == 0 and (start == 0 or en[start] == 0)


@pytest.mark.parametrize("workers", [1, 2])
def test_chunks_of_a_saturated_link_equal_a_single_pass(saturated, tmp_path, workers):
    single = _copy(saturated, tmp_path / "single.h5")
    chunked = _copy(saturated, tmp_path / "chunked.h5")
    (one,) = batch.decode_files([single], sources=["probe"], chunk_samples=1 << 40)
    (many,) = batch.decode_files([chunked], sources=["probe"], workers=workers, chunk_samples=5000)
    assert one.error is None and many.error is None
    assert one.written["probe"]["ethernet"] >= 40
    assert _tables(chunked) == _tables(single)


def test_fragments_cut_apart_are_decoded_again_from_the_cut(fragmented, tmp_path):
    """Where a cut falls between fragments the warm-up does not cover (the third fragment after a cut
    between the second and the third), the chunks' carried states differ; the chunk after the cut is
    decoded again from there with the state before it, and the table is the single pass's."""
    with CaptureSet.open(fragmented) as cs:
        source = cs.source("probe")
        stack = _tx_stack(source)
        jobs = [batch.Job(str(fragmented), "probe", (stack,), "builtin", batch.Chunk((lo, hi), ((a, b),)))
                for a, b, lo, hi in batch.plan_chunks(source, stack, 3000)]
    parts = {i: batch.run_job(job) for i, job in enumerate(jobs)}
    as_planned = np.concatenate([p for i in range(len(jobs)) for p in parts[i].tables[0]])
    assert batch.reconcile(jobs, parts) > 0
    reconciled = np.concatenate([p for i in range(len(jobs)) for p in parts[i].tables[0]])
    n = source.num_samples
    whole = np.concatenate(batch.run_job(batch.Job(str(fragmented), "probe", (stack,), "builtin",
                                                   batch.Chunk((0, n), ((0, n),)))).tables[0])
    assert reconciled.tobytes() == whole.tobytes()
    assert as_planned.tobytes() != whole.tobytes()  # the warm-up alone would lose sequence numbers
    assert (whole["frag_offset"] > 0).sum() >= 20 and (whole["seq"][whole["frag_offset"] > 0] >= 0).all()

    single = _copy(fragmented, tmp_path / "single.h5")
    chunked = _copy(fragmented, tmp_path / "chunked.h5")
    batch.decode_files([single], sources=["probe"], chunk_samples=1 << 40)
    (result,) = batch.decode_files([chunked], sources=["probe"], workers=2, chunk_samples=3000)
    assert result.error is None
    assert _tables(chunked) == _tables(single)


def test_dask_cluster_gives_the_same_tables(stream, single_pass, tmp_path):
    distributed = pytest.importorskip("distributed", reason="Dask distributed is installed by make test")
    path = _copy(stream, tmp_path / "dask.h5")
    damaged = _copy(stream, tmp_path / "damaged.h5")  # a flipped bit in a stored chunk: its checksum fails
    with h5py.File(damaged, "r") as h5:
        chunk = h5["sources/send_pci/samples"].id.get_chunk_info(0)
    raw = bytearray(damaged.read_bytes())
    raw[chunk.byte_offset + chunk.size // 2] ^= 0x04
    damaged.write_bytes(bytes(raw))
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as lc:
        r = subprocess.run([sys.executable, "-m", "nicrig", "decode", str(damaged), str(path), "--scheduler",
                            lc.scheduler_address, "--chunk-samples", "3000", "--json"],
                           capture_output=True, text=True, timeout=300)
    assert r.returncode == 1, r.stderr  # the damaged file failed alone, the other was decoded
    assert "Traceback" not in r.stderr and f"nicrig: error: {damaged}: source 'send_pci' samples" in r.stderr
    assert "checksum fails" in r.stderr
    assert _tables(path) == single_pass


def test_up_to_date_tables_are_skipped_unless_forced(stream, tmp_path):
    path = _copy(stream, tmp_path / "skip.h5")
    run = lambda *a: subprocess.run([sys.executable, "-m", "nicrig", "decode", str(path), *a],  # noqa: E731
                                    capture_output=True, text=True)
    first = run("--source", "send_pci")
    assert first.returncode == 0 and "decoded/send_pci/pci:" in first.stdout and "rows" in first.stdout
    again = run("--source", "send_pci")
    assert again.returncode == 0 and "up to date" in again.stdout and "rows" not in again.stdout
    forced = run("--source", "send_pci", "--force")
    assert "rows" in forced.stdout and "up to date" not in forced.stdout
    # Other options are another decode: the table is redone.
    other = run("--source", "send_pci", "-P",
                "pci:frame=FRAME#:irdy=IRDY#:trdy=TRDY#:devsel=DEVSEL#:stop=STOP#:ad=AD:cbe=C/BE#:clock=state:bars=0x0+0x10")
    assert other.returncode == 0 and "decoded/send_pci/pci:" in other.stdout and "up to date" not in other.stdout


def test_a_corrupt_or_foreign_file_fails_alone(stream, tmp_path):
    good = _copy(stream, tmp_path / "good.h5")
    broken = tmp_path / "broken.h5"
    broken.write_bytes(stream.read_bytes()[:50_000])
    foreign = tmp_path / "foreign.h5"
    with h5py.File(foreign, "w") as f:
        f["x"] = np.arange(3)
    r = subprocess.run([sys.executable, "-m", "nicrig", "decode", str(broken), str(good), str(foreign), "--json"],
                       capture_output=True, text=True)
    assert r.returncode == 1
    import json
    out = json.loads(r.stdout)
    assert "error" in out[str(broken)] and "error" in out[str(foreign)]
    assert out[str(good)]["send_pci"]["pci"] > 0
    assert str(broken) in r.stderr and str(foreign) in r.stderr


_REAL_RUN_JOB = batch.run_job


def _dies_on_victim(job, progress=None):
    """A job that kills its worker process (as the OOM killer would) when it reaches the victim file."""
    if job.path == os.environ.get("NICRIG_TEST_VICTIM"):
        os.kill(os.getpid(), signal.SIGKILL)
    return _REAL_RUN_JOB(job, progress)


def test_a_killed_worker_fails_its_file_and_writes_no_half_table(stream, tmp_path, monkeypatch):
    victim = _copy(stream, tmp_path / "victim.h5")
    monkeypatch.setenv("NICRIG_TEST_VICTIM", str(victim))
    monkeypatch.setattr(batch, "run_job", _dies_on_victim)  # the pool forks: its workers see the patch
    (result,) = batch.decode_files([victim], workers=2, chunk_samples=3000)
    assert result.error and "worker died" in result.error
    with CaptureSet.open(victim) as cs:
        assert not [t for t in cs.table_names() if t.startswith("decoded/")]
    with h5py.File(victim) as f:
        assert "decoded" not in f or not list(f["decoded"].keys())


def test_ctrl_c_keeps_finished_files_and_leaves_the_rest_whole(stream, single_pass, tmp_path):
    """Ctrl-C while a second file decodes: the first keeps its new tables, the second its old ones."""
    first = _copy(stream, tmp_path / "first.h5")
    second = simulate_set(tmp_path, "second", nic="sk9843", bus="pci32-33", recording=Recording(with_ad=True),
                          kind="stream", size_bytes=1000, spacing_us=15, count=600)
    batch.decode_files([second])
    before = _tables(second)
    proc = subprocess.Popen([sys.executable, "-u", "-m", "nicrig", "decode", str(first), str(second), "--force",
                             "--engine", "sigrok"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=as_from_a_shell)
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith(str(first)):
            break
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert _tables(first) == single_pass
    assert _tables(second) == before
    with h5py.File(second) as f:
        leftovers: list[str] = []
        f.visit(lambda n: leftovers.append(n) if n.endswith(".partial") else None)
    assert leftovers == []


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # the dropped interrupt, reported
def test_ctrl_c_dropped_by_a_finalizer_still_stops_the_batch(stream, single_pass, tmp_path):
    """Python drops a KeyboardInterrupt raised inside a finalizer (h5py's weak-reference callbacks run
    often while files close); the batch still stops before the next file's tables are written."""
    first, second = _copy(stream, tmp_path / "first.h5"), _copy(stream, tmp_path / "second.h5")

    class Finalizer:
        def __del__(self) -> None:
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(100_000):  # the handler runs, and raises, in here
                pass

    def on_file(result: batch.FileResult) -> None:
        if result.path == str(first):
            Finalizer()

    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            batch.decode_files([first, second], on_file=on_file)
    finally:
        signal.signal(signal.SIGINT, old)
    assert _tables(first) == single_pass
    assert _tables(second) == {}


def test_progress_reaches_the_total_and_can_cancel(stream, tmp_path):
    path = _copy(stream, tmp_path / "progress.h5")
    seen: list[tuple[int, int]] = []
    batch.decode_files([path], progress=lambda d, t: seen.append((d, t)))
    assert seen and seen[-1][0] == seen[-1][1] > 0
    assert all(a[0] <= b[0] for a, b in zip(seen, seen[1:]))

    class Stop(Exception):
        pass

    def cancel(done: int, total: int) -> None:
        raise Stop

    fresh = _copy(stream, tmp_path / "cancelled.h5")
    with pytest.raises(Stop):
        batch.decode_files([fresh], progress=cancel)
    with CaptureSet.open(fresh) as cs:
        assert not [t for t in cs.table_names() if t.startswith("decoded/")]
