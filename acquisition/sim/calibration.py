"""The simulated rig against Hughes-Jones et al. 2003 (seed 002): every configuration, measured as a lab would.

Each configuration the seed measured (board, bus, NIC) is simulated, decoded
by nicrig's decoders and measured by nicrig's analyses (``analysis.bus``);
the simulator's ``truth/`` tables are never read. Each figure of seed 002
sections 4-9 and figure 9.1 (``/work/shared/reference/seed_figures.json``)
that the model covers becomes a :class:`Row`: the seed's value, the measured
one, the relative error, and whether it is within tolerance; a figure the
model cannot reproduce, or that the seed contradicts, carries the reason.

``bench/calibration.py`` prints the table; ``tests/test_calibration.py`` runs
a reduced one and fails when a covered row leaves its tolerance.
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from nicrig.acquisition.capture import CaptureSet
from nicrig.acquisition.sim import profiles
from nicrig.acquisition.sim.model import Scenario
from nicrig.acquisition.sim.rig import simulate
from nicrig.analysis import bus
from nicrig.analysis.citations import HUGHES_JONES
from nicrig.decoders.batch import decode_file

#: Relative tolerance of a covered row (issue 18: within 5%).
TOLERANCE = 0.05
#: Seed 002's "wire" overhead per UDP packet: 8 gap + 6 preamble + 18 Ethernet + 28 IP/UDP bytes (§3.2, note 2).
SEED_WIRE_OVERHEAD_BYTES = 60


@dataclass(frozen=True)
class Config:
    """One board, bus and NIC of seed 002, as profile names."""

    board: str
    host: str
    bus: str
    nic: str

    @property
    def label(self) -> str:
        return f"{self.nic} on {self.host} {self.bus}"


@dataclass(frozen=True)
class Row:
    """One figure of the seed against the simulated rig's measurement of it.

    ``note`` is empty for a covered row; otherwise it says why the row is not
    held to the tolerance (the seed contradicts itself, or the mechanism is
    outside the model).
    """

    config: str
    quantity: str
    source: str
    unit: str
    seed: float
    measured: float
    note: str = ""
    tolerance: float = TOLERANCE

    @property
    def error(self) -> float:
        """Relative error of the measurement (NaN when nothing was measured)."""
        return (self.measured - self.seed) / self.seed if math.isfinite(self.measured) else math.nan

    @property
    def covered(self) -> bool:
        return not self.note

    @property
    def ok(self) -> bool:
        return (not self.covered) or (math.isfinite(self.error) and abs(self.error) <= self.tolerance)

    def as_dict(self) -> dict[str, object]:
        return {"config": self.config, "quantity": self.quantity, "source": self.source, "unit": self.unit,
                "seed": self.seed, "measured": None if not math.isfinite(self.measured) else self.measured,
                "error": None if not math.isfinite(self.error) else self.error, "covered": self.covered,
                "ok": self.ok, "note": self.note}


@dataclass(frozen=True)
class Sizes:
    """How long the simulated runs are: the full table, or a reduced one for the test."""

    saturated_packets: int = 900
    wire_speed_packets: int = 700
    trace_packets: int = 8


REDUCED = Sizes(saturated_packets=400, wire_speed_packets=220, trace_packets=4)

CONFIGS = {
    "sk-370dle-32": Config("SuperMicro 370DLE", "supermicro-370dle", "pci32-33", "sk9843"),
    "sk-370dle-64": Config("SuperMicro 370DLE", "supermicro-370dle", "pci64-66", "sk9843"),
    "intel-370dle-64": Config("SuperMicro 370DLE", "supermicro-370dle", "pci64-66", "intel-pro1000"),
    "alteon-370dle-32": Config("SuperMicro 370DLE", "supermicro-370dle", "pci32-33", "alteon-acenic"),
    "alteon-370dle-64": Config("SuperMicro 370DLE", "supermicro-370dle", "pci64-66", "alteon-acenic"),
    "sk-das": Config("IBM das", "ibm-das", "pci64-33", "sk9843"),
    "intel-das": Config("IBM das", "ibm-das", "pci64-33", "intel-pro1000"),
    "sk-p4dp6": Config("SuperMicro P4DP6", "supermicro-p4dp6", "pci64-66", "sk9843"),
    "intel-p4dp6": Config("SuperMicro P4DP6", "supermicro-p4dp6", "pci64-66", "intel-pro1000"),
    "sk-p4dp8": Config("SuperMicro P4DP8-G2", "supermicro-p4dp8-g2", "pci64-66", "sk9843"),
    "intel-p4dp8": Config("SuperMicro P4DP8-G2", "supermicro-p4dp8-g2", "pci64-66", "intel-pro1000"),
}

#: Fig. 9.1: the best rate of 1472-byte packets (wire rate with the 60 overhead bytes), Mbit/s.
MAX_THROUGHPUT_MBPS = {
    "sk-370dle-32": 584, "sk-370dle-64": 720, "intel-370dle-64": 910, "alteon-370dle-32": 674,
    "alteon-370dle-64": 930, "sk-das": 790, "intel-das": 930, "sk-p4dp6": 876, "intel-p4dp6": 950,
    "sk-p4dp8": 990, "intel-p4dp8": 995,
}
THROUGHPUT_SECTIONS = {
    "sk-370dle-32": "§4.1.2, fig. 9.1", "sk-370dle-64": "§4.1.2, fig. 9.1", "intel-370dle-64": "§4.2.2, fig. 9.1",
    "alteon-370dle-32": "§4.3.2, fig. 9.1", "alteon-370dle-64": "§4.3.2, fig. 9.1", "sk-das": "§5.1.1, fig. 9.1",
    "intel-das": "§5.2.2, fig. 9.1", "sk-p4dp6": "§6.1.2, fig. 9.1", "intel-p4dp6": "§6.2.2, fig. 9.1",
    "sk-p4dp8": "§7.1.2, fig. 9.1", "intel-p4dp8": "§7.2.1, fig. 9.1",
}
#: Rows whose figures the model is not held to, and why (a sentence each).
EXPLAINED = {
    ("sk-p4dp8", "max throughput, 1472 B"):
        "The seed's SK-9843s on this board were much later revisions (§7.1.2) whose differences it does not "
        "describe; the model has only the earlier card.",
    ("intel-p4dp8", "max throughput, 1472 B"):
        "The seed measured the on-board 82546EB here (§7.2.1), a different controller from the modelled 82544.",
}


def _cite(sections: str) -> str:
    return f"{HUGHES_JONES}, {sections}"


@dataclass
class Measured:
    """A decoded capture set measured with ``analysis.bus``."""

    timeline: bus.BusTimeline
    payload_bytes: int
    extra: dict[str, float] = field(default_factory=dict)


def _measure(path: Path) -> bus.BusTimeline:
    decode_file(path, force=True)
    with CaptureSet.open(path) as cs:
        d = {n: cs.read_table(n) for n in cs.table_names() if n.startswith("decoded/")}
    return bus.bus_timeline(d["decoded/send_pci/pci"], d["decoded/send_pci/irq"], d["decoded/recv_pci/pci"],
                            d["decoded/recv_pci/irq"], d["decoded/probe/ethernet"])


def _run(folder: Path, name: str, cfg: Config, scenario: Scenario) -> bus.BusTimeline:
    out = folder / f"{name}.h5"
    simulate(scenario, profiles.load("bus", cfg.bus), profiles.load("nic", cfg.nic), profiles.load("host", cfg.host),
             out)
    timeline = _measure(out)
    out.unlink()
    return timeline


def steady_receive_period_us(timeline: bus.BusTimeline) -> float:
    """Mean time between received frames' DMA on the receiving bus over the last half of a saturated stream.

    Once the receiver's ring and FIFO are full it takes frames at its own
    pace, which is what the seed's throughput plateau shows.
    """
    assert timeline.recv is not None
    starts = np.array([t.start_ns for t in timeline.recv.activity.of_role("receive")])
    if starts.size < 8:
        return math.nan
    half = starts[starts.size // 2:]
    return float((half[-1] - half[0]) / (half.size - 1) / 1000)


def wire_rate_mbps(payload_bytes: int, period_us: float) -> float:
    """Seed 002's "wire" rate (§3.2): payload plus 60 overhead bytes per packet, per ``period_us``, in Mbit/s."""
    return (payload_bytes + SEED_WIRE_OVERHEAD_BYTES) * 8 / period_us


def _spread(s: bus.Spread) -> float:
    return s.median


def _throughput_rows(key: str, cfg: Config, folder: Path, sizes: Sizes) -> Iterator[Row]:
    tl = _run(folder, f"{key}-sat", cfg, Scenario(kind="stream", size_bytes=1472, count=sizes.saturated_packets,
                                                   spacing_us=0.0))
    period = steady_receive_period_us(tl)
    quantity = "max throughput, 1472 B"
    yield Row(key, quantity, _cite(THROUGHPUT_SECTIONS[key]), "Mbit/s", MAX_THROUGHPUT_MBPS[key],
              wire_rate_mbps(1472, period), EXPLAINED.get((key, quantity), ""))
    if key == "sk-370dle-64":
        yield Row(key, "smallest spacing without loss, 1472 B (receive period at saturation)",
                  _cite("§4.1.2"), "us", 17.0, period)
    if key == "sk-370dle-32":
        yield Row(key, "smallest spacing without loss, 1472 B (receive period at saturation)",
                  _cite("§4.1.2"), "us", 20.5, period)


def _trace_rows_sk(key: str, cfg: Config, folder: Path, sizes: Sizes) -> Iterator[Row]:
    tl = _run(folder, f"{key}-trace", cfg, Scenario(kind="stream", size_bytes=1400, count=sizes.trace_packets,
                                                     spacing_us=40.0))
    paths = [p for p in tl.paths_out if math.isfinite(p.first_word_to_first_word_us)]
    assert tl.send is not None
    yield Row(key, "send DMA of a 1400-byte frame", _cite("§4.1.3"), "us", 3.0, _spread(tl.send.dma.fetch_us))
    yield Row(key, "first word on send PCI to first word on receive PCI", _cite("§4.1.3"), "us", 23.0,
              float(np.median([p.first_word_to_first_word_us for p in paths])))
    yield Row(key, "frame on the medium, 1400 B", _cite("§4.1.3"), "us", 11.6,
              float(np.median([p.on_wire_us for p in paths])))
    yield Row(key, "software send to receive (CSR setup to receive service)", _cite("§4.1.3"), "us", 36.0,
              float(np.median([p.software_to_service_us for p in paths])))


def _request_rows_intel(key: str, cfg: Config, folder: Path, sizes: Sizes) -> Iterator[Row]:
    tl = _run(folder, f"{key}-request", cfg, Scenario(kind="latency", size_bytes=1400, request_bytes=64,
                                                       count=sizes.trace_packets))
    assert tl.send is not None and tl.recv is not None
    requests = [p for p in tl.paths_out if math.isfinite(p.csr_setup_us)]
    yield Row(key, "CSR setup before sending the request", _cite("§4.2.3"), "us", 1.75,
              float(np.median([p.csr_setup_us for p in requests])))
    fetch = [t for t in tl.send.activity.of_role("fetch")]
    yield Row(key, "DMA of the 64-byte request", _cite("§4.2.3"), "us", 0.25,
              float(np.median([(t.end_ns - t.data_start_ns) / 1000 for t in fetch])))
    assert tl.send.interrupts is not None and tl.recv.interrupts is not None
    for side, hb in (("send", tl.send), ("receive", tl.recv)):
        assert hb.interrupts is not None
        yield Row(key, f"PCI transfer to CSR update, {side} side", _cite("§4.2.3"), "us", 70.0,
                  _spread(hb.interrupts.dma_to_csr_us))


def _wire_speed_rows(key: str, cfg: Config, folder: Path, sizes: Sizes) -> Iterator[Row]:
    tl = _run(folder, f"{key}-11us", cfg, Scenario(kind="stream", size_bytes=1400, count=sizes.wire_speed_packets,
                                                    spacing_us=11.0))
    assert tl.send is not None and tl.recv is not None
    send, recv = tl.send.occupancy.busy_per_frame_us, tl.recv.occupancy.busy_per_frame_us
    figures = {
        "intel-370dle-64": ("§4.2.3", 4.7, 43, 3.25, 30),
        "intel-das": ("§5.2.3", 9.3, 82, 5.9, 50),
        "intel-p4dp6": ("§6.2.3", 6.2, 50, 3.0, 25),
    }[key]
    sec, s_us, s_pct, r_us, r_pct = figures
    yield Row(key, "send PCI busy per 1400-byte frame at 11 us spacing", _cite(sec), "us", s_us, send)
    yield Row(key, "send PCI usage (busy per frame / 11 us spacing, as the seed divides)", _cite(sec), "%",
              s_pct, 100 * send / 11.0)
    yield Row(key, "receive PCI busy per frame", _cite(sec), "us", r_us, recv)
    yield Row(key, "receive PCI usage (busy per frame / 11 us)", _cite(sec), "%", r_pct, 100 * recv / 11.0)
    if key == "intel-370dle-64":
        assert tl.send.interrupts is not None and tl.recv.interrupts is not None
        yield Row(key, "frames sent per interrupt", _cite("§4.2.1"), "frames", 33,
                  tl.send.interrupts.sent_per_interrupt)
        yield Row(key, "frames received per interrupt", _cite("§4.2.1"), "frames", 10,
                  tl.recv.interrupts.received_per_interrupt)
        assert tl.pause is not None
        yield Row(key, "period of the PAUSE gaps", _cite("§4.2.3"), "us", 900, _spread(tl.pause.period_us))
    if key == "intel-p4dp6":
        yield Row(key, "receive DMA of a 1400-byte frame", _cite("§6.2.3"), "us", 2.9,
                  _spread(tl.recv.dma.receive_us))
        sends = tl.send.csr.send_setup_us
        yield Row(key, "PCI busy setting up the CSRs for a send", _cite("§6.2.3"), "us", 2.0, _spread(sends))


#: What is measured on which configuration, in the order of the seed's sections.
PLAN: tuple[tuple[str, Callable[[str, Config, Path, Sizes], Iterator[Row]]], ...] = (
    *((k, _throughput_rows) for k in CONFIGS),
    ("sk-370dle-64", _trace_rows_sk),
    ("intel-370dle-64", _request_rows_intel),
    ("intel-370dle-64", _wire_speed_rows),
    ("intel-das", _wire_speed_rows),
    ("intel-p4dp6", _wire_speed_rows),
)


def calibrate(sizes: Sizes = Sizes(), *, only: set[str] | None = None,
              progress: Callable[[int, int, str], None] | None = None) -> list[Row]:
    """Simulate, decode and measure every planned configuration; the rows in the seed's order."""
    plan = [(k, f) for k, f in PLAN if only is None or k in only]
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="nicrig-calibration-") as tmp:
        for n, (key, measure) in enumerate(plan):
            if progress:
                progress(n, len(plan), CONFIGS[key].label)
            rows.extend(measure(key, CONFIGS[key], Path(tmp), sizes))
        if progress:
            progress(len(plan), len(plan), "done")
    return rows
