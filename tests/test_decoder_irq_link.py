"""The irq and linkactivity protocol decoders (decoders/irq, decoders/linkactivity), run by the real sigrok-cli.

Timing captures are drawn sample by sample at a known sample rate; the expected pulse edges,
durations, frame sizes (at the link rate) and gaps are computed here from the drawn waveform.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from sigrok_run import decoder_spec, run_sigrok, sigrok_cli_available, write_session

pytestmark = [
    pytest.mark.sigrok,
    pytest.mark.skipif(not sigrok_cli_available(), reason="needs sigrok-cli"),
]


def _clean(res):
    assert res.returncode == 0, res.stderr
    assert "Traceback" not in res.stderr, res.stderr
    return res


def line(n: int, idle: int, pulses: list[tuple[int, int]]) -> np.ndarray:
    """``n`` samples at level ``idle``, the other level over each ``[ss, es)`` of ``pulses``."""
    x = np.full(n, idle, dtype=np.uint8)
    for ss, es in pulses:
        x[ss:es] = 1 - idle
    return x


def edges(x: np.ndarray, active: int) -> list[tuple[int, int]]:
    """Complete pulses at level ``active`` (start and end inside the capture), found with numpy."""
    a = (x == active).astype(np.int8)
    d = np.diff(a)
    starts = list(np.flatnonzero(d == 1) + 1)
    ends = list(np.flatnonzero(d == -1) + 1)
    if a[0]:
        ends = ends[1:]
    return list(zip(starts, ends))


# -- irq ---------------------------------------------------------------------------------------

IRQ_RATE = 100e6  # 10 ns per sample


def irq_spec(polarity: str | None = None) -> str:
    return decoder_spec("irq", {"irq": "INTA#"}, {"polarity": polarity} if polarity else None)


def test_irq_active_low(tmp_path: Path) -> None:
    pulses = [(1000, 1150), (5000, 5001), (9000, 19000)]
    path = write_session(tmp_path / "irq.sr", ["INTA#"], line(30000, 1, pulses)[:, None], IRQ_RATE)
    got = _clean(run_sigrok(path, [irq_spec()], binary="irq=records")).json_lines()
    assert got == [{"ss": 1000, "es": 1150, "duration_ns": 1500},
                   {"ss": 5000, "es": 5001, "duration_ns": 10},
                   {"ss": 9000, "es": 19000, "duration_ns": 100000}]
    res = _clean(run_sigrok(path, [irq_spec()], annotations="irq"))
    anns = [(a.ss, a.es, a.text) for a in res.annotations]
    assert (1000, 1150, "IRQ asserted for 1.5 us") in anns
    assert (5000, 5001, "IRQ asserted for 10 ns") in anns
    assert (9000, 19000, "IRQ asserted for 100 us") in anns
    assert (1150, 5000, "Deasserted for 38.5 us") in anns
    assert not any("Warning" in t or "still" in t for _, _, t in anns)


def test_irq_polarity(tmp_path: Path) -> None:
    pulses = [(100, 300), (700, 800)]
    path = write_session(tmp_path / "hi.sr", ["INTA#"], line(1000, 0, pulses)[:, None], IRQ_RATE)
    got = _clean(run_sigrok(path, [irq_spec("active-high")], binary="irq=records")).json_lines()
    assert [(r["ss"], r["es"], r["duration_ns"]) for r in got] == [(100, 300, 2000), (700, 800, 1000)]
    # Read as active-low, the same line is asserted between the pulses; the stretch from
    # sample 0 began before the capture and is not a record.
    got = _clean(run_sigrok(path, [irq_spec("active-low")], binary="irq=records")).json_lines()
    assert [(r["ss"], r["es"]) for r in got] == [(300, 700)]


def test_irq_asserted_at_both_ends_of_the_capture(tmp_path: Path) -> None:
    x = line(2000, 1, [(0, 50), (500, 600), (1900, 2000)])
    path = write_session(tmp_path / "ends.sr", ["INTA#"], x[:, None], IRQ_RATE)
    got = _clean(run_sigrok(path, [irq_spec()], binary="irq=records")).json_lines()
    assert [(r["ss"], r["es"]) for r in got] == [(500, 600)]
    texts = _clean(run_sigrok(path, [irq_spec()], annotations="irq")).texts()
    assert "IRQ already asserted when the capture started" in texts
    assert "Asserted at least 500 ns (since before the capture)" in texts
    assert "IRQ still asserted at the end of the capture" in texts


def test_irq_unknown_samplerate(tmp_path: Path) -> None:
    path = write_session(tmp_path / "norate.sr", ["INTA#"], line(300, 1, [(100, 150)])[:, None], 0)
    got = _clean(run_sigrok(path, [irq_spec()], binary="irq=records")).json_lines()
    assert got == [{"ss": 100, "es": 150, "duration_ns": -1}]
    assert "IRQ asserted for 50 samples" in _clean(run_sigrok(path, [irq_spec()], annotations="irq")).texts()


def test_irq_many_random_pulses_match_numpy(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    x = np.repeat(rng.integers(0, 2, 4000, dtype=np.uint8), rng.integers(1, 40, 4000))
    path = write_session(tmp_path / "many.sr", ["INTA#"], x[:, None], IRQ_RATE)
    got = _clean(run_sigrok(path, [irq_spec()], binary="irq=records")).json_lines()
    want = edges(x, 0)
    assert [(r["ss"], r["es"]) for r in got] == want
    assert all(r["duration_ns"] == (r["es"] - r["ss"]) * 10 for r in got)


# -- linkactivity --------------------------------------------------------------------------------

LINK_RATE = 500e6  # 2 ns per sample: 4 samples per octet at 1 Gb/s


def link_spec(**options: str) -> str:
    return decoder_spec("linkactivity", {"act": "ACT"}, options or None)


def frame_train(sizes: list[int], gaps: list[int], octet_samples: int, preamble: bool,
                start: int = 100) -> tuple[np.ndarray, list[tuple[int, int]]]:
    """Activity pulses for frames of ``sizes`` octets (destination .. FCS), ``gaps`` octet times apart."""
    pulses, t = [], start
    for size, gap in zip(sizes, gaps):
        length = (size + (8 if preamble else 0)) * octet_samples
        pulses.append((t, t + length))
        t += length + gap * octet_samples
    return line(t + 100, 0, pulses), pulses


def test_linkactivity_sizes_and_gaps_with_preamble(tmp_path: Path) -> None:
    sizes, gaps = [64, 1518, 100, 9018, 64], [12, 12, 50, 12, 12]
    x, pulses = frame_train(sizes, gaps, 4, preamble=True)
    path = write_session(tmp_path / "act.sr", ["ACT"], x[:, None], LINK_RATE)
    got = _clean(run_sigrok(path, [link_spec()], binary="linkactivity=records")).json_lines()
    assert [r["est_bytes"] for r in got] == sizes
    assert [(r["ss"], r["es"]) for r in got] == pulses
    assert [r["duration_ns"] for r in got] == [(s + 8) * 8 for s in sizes]
    assert [r["gap_ns"] for r in got] == [-1] + [g * 8 for g in gaps[:-1]]
    texts = _clean(run_sigrok(path, [link_spec()], annotations="linkactivity")).texts()
    assert "Frame ~1518 octets (12.208 us)" in texts and "Gap 96 ns (12.0 octet times)" in texts
    assert not any(t.startswith(("Pulse of", "Gap of")) for t in texts)


def test_linkactivity_without_preamble_and_at_100_mbps(tmp_path: Path) -> None:
    sizes, gaps = [64, 1518, 300], [20, 20, 20]
    x, _ = frame_train(sizes, gaps, 4, preamble=False)
    path = write_session(tmp_path / "nopre.sr", ["ACT"], x[:, None], LINK_RATE)
    got = _clean(run_sigrok(path, [link_spec(includes_preamble="no")], binary="linkactivity=records")).json_lines()
    assert [r["est_bytes"] for r in got] == sizes
    # 100 Mb/s: 80 ns = 40 samples per octet.
    x, _ = frame_train(sizes, gaps, 40, preamble=True)
    path = write_session(tmp_path / "fe.sr", ["ACT"], x[:, None], LINK_RATE)
    got = _clean(run_sigrok(path, [link_spec(link_rate="1e8")], binary="linkactivity=records")).json_lines()
    assert [r["est_bytes"] for r in got] == sizes
    assert [r["gap_ns"] for r in got] == [-1, 1600, 1600]


def test_linkactivity_warnings_and_partial_pulses(tmp_path: Path) -> None:
    # Partial pulse at the start, a 10-octet glitch, a gap of 4 octet times, one cut at the end.
    x = line(3000, 0, [(0, 40), (200, 272), (288, 288 + 72 * 4), (2900, 3000)])
    path = write_session(tmp_path / "warn.sr", ["ACT"], x[:, None], LINK_RATE)
    got = _clean(run_sigrok(path, [link_spec()], binary="linkactivity=records")).json_lines()
    assert [(r["ss"], r["es"], r["est_bytes"]) for r in got] == [(200, 272, 10), (288, 576, 64)]
    texts = _clean(run_sigrok(path, [link_spec()], annotations="linkactivity")).texts()
    assert "Frame already on the link when the capture started" in texts
    assert "Pulse of 144 ns: shorter than a 64-octet frame" in texts
    assert "Gap of 4.0 octet times, below the 12 minimum" in texts
    assert "Frame still on the link at the end of the capture" in texts


# -- robustness ----------------------------------------------------------------------------------

def test_random_bits(tmp_path: Path) -> None:
    rng = np.random.default_rng(9)
    for i, n in enumerate([1, 2, 50000]):
        x = rng.integers(0, 2, (n, 1), dtype=np.uint8)
        path = write_session(tmp_path / f"r{i}.sr", ["IRQ"], x, IRQ_RATE)
        for spec, dec in ((decoder_spec("irq", {"irq": "IRQ"}), "irq"),
                          (decoder_spec("linkactivity", {"act": "IRQ"}), "linkactivity")):
            _clean(run_sigrok(path, [spec], annotations=dec))
            got = _clean(run_sigrok(path, [spec], binary=f"{dec}=records")).json_lines()
            active = 0 if dec == "irq" else 1
            assert [(r["ss"], r["es"]) for r in got] == edges(x[:, 0], active)
