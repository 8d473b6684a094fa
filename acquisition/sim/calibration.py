"""The simulated rig against Hughes-Jones et al. 2003, measured as a user measures a real rig.

Every configuration the paper measured (board, bus, NIC) is run through the
commands a user runs: ``nicrig simulate``, ``nicrig decode`` where the row
needs the buses, and ``nicrig report --json``; each row's number is read from
the report (stream rates from its stream estimator, loss as its loss, latency
lines and widths from its latency estimator, bus timings from its bus
tables), never from the simulator's ``truth/`` tables. Each quantitative
figure of the paper's §3-§9 that a simulated rig can produce becomes a
:class:`Row`: the paper's value, the measured one, the relative error. A row
beyond :data:`TOLERANCE` that the paper contradicts (its own numbers
disagree, or disagree with physics) carries a note giving those numbers.

``bench/calibration.py`` runs it and prints the table docs/simulator.md
holds; ``tests/test_calibration.py`` runs a few representative rows.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nicrig.acquisition.sim import profiles
from nicrig.analysis.bus import host_software_time_us
from nicrig.analysis.citations import HUGHES_JONES
from nicrig.analysis.report import INTERVAL_ROW, TIMER_ROW
from nicrig.udpmon.sequence import HUGHES_JONES_2003_OVERHEAD_BYTES

#: A row within this relative error of the paper's figure is calibrated ...
TOLERANCE = 0.05
#: ... and no row may be beyond this unless the paper contradicts itself or physics (the row says how).
LIMIT = 0.10
#: The largest UDP payload of one 1500-byte frame, the size of fig. 9.1's throughputs.
FULL_FRAME = 1472


@dataclass(frozen=True)
class Config:
    """One board, bus and NIC of Hughes-Jones et al. 2003, as profile names (``recv_host``: host B's if it
    differs)."""

    board: str
    host: str
    bus: str
    nic: str
    recv_host: str | None = None


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
    # §8: an 800 MHz sender and a 2.0 GHz receiver with the Intel PRO/1000 XT; the nearest of the paper's hosts.
    "intel-sec8": Config("§8 back-to-back PCs", "supermicro-370dle", "pci64-66", "intel-pro1000",
                         recv_host="supermicro-p4dp6"),
}


@dataclass(frozen=True)
class Row:
    """One figure of the paper against the simulated rig's measurement of it.

    The error is relative to the paper's value, or to the nearer end of its
    range (``seed`` to ``seed_high``; 0 inside it), or to ``scale`` when the
    figure is a share of a whole (a loss of 0% against 100%). ``note``: why a
    row beyond :data:`LIMIT` is not a fault of the model, with the paper's
    own numbers that disagree.
    """

    config: str
    quantity: str
    source: str
    unit: str
    seed: float
    measured: float
    ci95: float = math.nan
    note: str = ""
    seed_high: float | None = None
    scale: float | None = None

    @property
    def error(self) -> float:
        """Relative error of the measurement (NaN when nothing was measured)."""
        if not math.isfinite(self.measured):
            return math.nan
        high = self.seed if self.seed_high is None else self.seed_high
        if self.seed <= self.measured <= high:
            return 0.0
        ref = high if self.measured > high else self.seed
        return (self.measured - ref) / (self.scale or ref)

    @property
    def within(self) -> float:
        """The band the row falls in: :data:`TOLERANCE`, :data:`LIMIT`, or inf (beyond both, or not measured)."""
        e = abs(self.error)
        return TOLERANCE if e <= TOLERANCE else LIMIT if e <= LIMIT else math.inf

    @property
    def ok(self) -> bool:
        """Within :data:`LIMIT`, or beyond it for a reason the paper gives (``note``)."""
        return self.within <= LIMIT or bool(self.note)

    def as_dict(self) -> dict[str, object]:
        def finite(v: float) -> float | None:
            return v if math.isfinite(v) else None
        return {"config": self.config, "quantity": self.quantity, "source": self.source, "unit": self.unit,
                "seed": self.seed, "seed_high": self.seed_high, "measured": finite(self.measured),
                "ci95": finite(self.ci95), "error": finite(self.error), "within": finite(self.within),
                "ok": self.ok, "note": self.note}


def cite(sections: str) -> str:
    return f"{HUGHES_JONES}, {sections}"


def wire_rate_mbps(user_mbps: float, payload_bytes: int) -> float:
    """A user (payload) rate as the paper's "wire" rate (Hughes-Jones et al. 2003, §3.2): payload plus
    :data:`~nicrig.udpmon.sequence.HUGHES_JONES_2003_OVERHEAD_BYTES` a packet (§3.2, note 2)."""
    return user_mbps * (payload_bytes + HUGHES_JONES_2003_OVERHEAD_BYTES) / payload_bytes


# -- how long the runs are ------------------------------------------------------------------------

@dataclass(frozen=True)
class Sizes:
    """How long the simulated runs are: the full table, or a reduced one."""

    #: Stream sweeps: packets a point, transmit spacings (us; 0: as fast as the sender can).
    stream_count: int = 1500
    spacings_us: tuple[float, ...] = (0.0, *range(10, 26))
    #: Sizes (bytes) standing for "smaller packets", those under 1000 bytes (§6.1.2, §6.2.2, §7.2.1).
    small_sizes: tuple[int, ...] = (128, 512, 896)
    #: Latency runs: response sizes and round trips a size (over 10 rounds).
    latency_sizes: str = "64:1472:128"
    latency_count: int = 800
    #: Round trips a size where a row is a histogram's width (FWHM): a width is known to a few per cent only from
    #: thousands of round trips.
    fwhm_count: int = 6400
    #: Recorded streams the bus rows are read from: packets (the PAUSE period needs several cycles).
    trace_count: int = 10
    wire_speed_count: int = 1800
    #: The §8 sweep: its receive interrupt delays (units of 1.024 us) for latency and for throughput.
    rxint_latency: tuple[int, ...] = (0, 40, 64, 100)
    rxint_stream: tuple[int, ...] = (0, 10, 20, 40, 64, 100)


REDUCED = Sizes(stream_count=600, spacings_us=(0.0, 12.0, 14.0, 17.0, 20.0), latency_sizes="64:1472:352",
                latency_count=60, fwhm_count=400, wire_speed_count=700, rxint_latency=(0, 64), rxint_stream=(20, 100))


# -- running the user's commands ------------------------------------------------------------------

@dataclass(frozen=True)
class Run:
    """One ``nicrig simulate`` (its arguments past the subcommand), decoded or not, and its report."""

    name: str
    args: tuple[str, ...]
    decode: bool = False


def _nicrig(*args: str, cwd: Path) -> None:
    r = subprocess.run([sys.executable, "-m", "nicrig", *args], capture_output=True, text=True, cwd=cwd)
    if r.returncode != 0:
        raise RuntimeError(f"nicrig {' '.join(args)} exited {r.returncode}:\n{r.stderr[-2000:]}")


def report_of(run: Run, folder: Path) -> dict[str, Any]:
    """Simulate ``run``, decode it if asked, and return ``nicrig report --json``'s report of it."""
    h5 = folder / f"{run.name}.h5"
    out = folder / f"{run.name}.json"
    _nicrig("simulate", *run.args, "--workers", "1", "-o", str(h5), cwd=folder)
    try:
        if run.decode:
            _nicrig("decode", str(h5), "--workers", "1", cwd=folder)
        _nicrig("report", str(h5), "--format", "json", "-o", str(out), cwd=folder)
        return json.loads(out.read_text(encoding="utf-8"))
    finally:
        for p in folder.glob(f"{run.name}.*"):
            p.unlink()


class Report:
    """What a report says, looked up by its titles and labels."""

    def __init__(self, data: Mapping[str, Any]):
        self.data = data
        self.sections = list(data.get("sections", []))

    def table(self, title: str) -> list[dict[str, Any]]:
        """The rows (column -> value) of the first table whose title starts with ``title`` ([] if none), as
        numbers (its ``raw_rows``: ``rows`` are the figures rounded to their uncertainty, as text)."""
        for s in self.sections:
            for t in s.get("tables", []):
                if t["title"].startswith(title):
                    return [dict(zip(t["columns"], r)) for r in t.get("raw_rows", t["rows"])]
        return []

    def item(self, label: str) -> Any:
        for s in self.sections:
            for it in s.get("items", []):
                if it["label"] == label:
                    raw = it.get("raw", {}).get("value")
                    return it["value"] if raw is None else raw
        return None

    def bus(self, quantity: str, side: str) -> float:
        """A row of the 'Bus measurements' table on ``side`` (``send_pci`` or ``recv_pci``); NaN if absent."""
        for r in self.table("Bus measurements"):
            if r["quantity"] == quantity:
                return _number(r.get(side))
        return math.nan

    def timeline_median(self, column: str, direction: str = "Frames from send_pci") -> float:
        """The median of a frame timeline column (its 'median of N frames' row)."""
        for r in self.table(direction):
            if str(r["frame"]).startswith("median"):
                return _number(r.get(column))
        return math.nan

    # -- results ------------------------------------------------------------------------------
    def best(self, size: int) -> dict[str, Any]:
        return next((r for r in self.table("Best throughput per size") if r["size (bytes)"] == size), {})

    def points(self, size: int) -> list[dict[str, Any]]:
        return [r for r in self.table("Every size and spacing") if r["size (bytes)"] == size]

    def line(self) -> dict[str, Any]:
        """The latency line the report fits on its chosen statistic, one frame."""
        statistic = self.item("statistic the lines are fitted on")
        return next((r for r in self.table("RTT = intercept + slope x size")
                     if r["fitted on"] == statistic and r["frames"] == 1), {})

    def per_size(self) -> list[dict[str, Any]]:
        return self.table("RTT per response size")


def _number(v: Any) -> float:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else math.nan


# -- the measurements -----------------------------------------------------------------------------

def _profile_args(cfg: Config, host: str | None = None, recv_host: str | None = None) -> tuple[str, ...]:
    out = ("--nic", cfg.nic, "--bus", cfg.bus, "--host", host or cfg.host)
    recv = recv_host or cfg.recv_host
    return out + (("--recv-host", recv) if recv else ())


def stream_sweep(key: str, cfg: Config, sizes: Sizes, *, packet_sizes: Sequence[int] = (FULL_FRAME,),
                 host: str | None = None, recv_host: str | None = None, name: str = "sweep") -> Run:
    """A stream of each of ``packet_sizes`` at every spacing of the sweep, one round (results only: nothing recorded
    but the first packet)."""
    spacings = ",".join(f"{s:g}" for s in sizes.spacings_us)
    return Run(f"{key}-{name}", ("--scenario", "stream", *_profile_args(cfg, host, recv_host), "--sizes",
                                 ",".join(map(str, packet_sizes)),
                                 "--spacing-us", spacings, "--count", str(sizes.stream_count), "--rounds", "1",
                                 "--order", "ascending", "--capture-count", "1"))


def latency_run(key: str, cfg: Config, sizes: Sizes, *, host: str | None = None, recv_host: str | None = None,
                name: str = "latency", seed: int = 1, response_sizes: str | None = None,
                count: int | None = None) -> Run:
    """Request-response over the single-frame sizes (or ``response_sizes``), ``count`` round trips a size, in rounds
    of random order (results only)."""
    return Run(f"{key}-{name}", ("--scenario", "latency", *_profile_args(cfg, host, recv_host), "--sizes",
                                 response_sizes or sizes.latency_sizes, "--count",
                                 str(count or sizes.latency_count), "--seed", str(seed), "--order-seed", str(seed),
                                 "--capture-count", "1"))


def recorded_stream(key: str, cfg: Config, name: str, size: int, spacing_us: float, count: int) -> Run:
    """A stream recorded whole and decoded: what the paper's logic analyzer shows."""
    return Run(f"{key}-{name}", ("--scenario", "stream", *_profile_args(cfg), "--sizes", str(size), "--spacing-us",
                                 f"{spacing_us:g}", "--count", str(count), "--rounds", "1", "--capture-count", "0"),
               decode=True)


def recorded_latency(key: str, cfg: Config, name: str, size: int, count: int) -> Run:
    return Run(f"{key}-{name}", ("--scenario", "latency", *_profile_args(cfg), "--sizes", str(size), "--count",
                                 str(count), "--rounds", "1", "--capture-count", "0"), decode=True)


@dataclass(frozen=True)
class Measurement:
    """Runs, and how their reports become rows (``rows(reports)``, the reports in the runs' order)."""

    runs: tuple[Run, ...]
    rows: Callable[[list[Report]], Iterable[Row]]


#: Fig. 9.1 (and the sections that state them): the best rate of 1472-byte packets, "wire" Mbit/s.
MAX_THROUGHPUT = {
    "sk-370dle-32": (584, "§4.1.2, fig. 9.1"), "sk-370dle-64": (720, "§4.1.2, fig. 9.1"),
    "intel-370dle-64": (910, "§4.2.2, fig. 9.1"), "alteon-370dle-32": (674, "§4.3.2, fig. 9.1"),
    "alteon-370dle-64": (930, "§4.3.2, fig. 9.1"), "sk-das": (790, "§5.1.1, fig. 9.1"),
    "intel-das": (930, "§5.2.2, fig. 9.1"), "sk-p4dp6": (876, "§6.1.2, fig. 9.1"),
    "intel-p4dp6": (950, "§6.2.2, fig. 9.1"), "sk-p4dp8": (990, "§7.1.2, fig. 9.1"),
    "intel-p4dp8": (995, "§7.2.1, fig. 9.1"),
}
#: Best rates of 1472-byte packets the paper quotes again elsewhere, with other values: (Mbit/s, section, note).
REQUOTED_THROUGHPUT = {
    "sk-370dle-32": (620, "§5.1.1",
                     "§5.1.1 compares the IBM das's 790 Mbit/s with \"only 620 Mbit/s on the Supermicro 370DLE\", a "
                     "figure the paper gives nowhere else: its own rates for the SK-9843 on that board are 584 Mbit/s "
                     "on the 32-bit 33 MHz bus and 720 on the 64-bit 66 MHz one (§4.1.2, fig. 9.1); the row holds "
                     "the nearer of the two."),
}
#: "At inter-packet spacings less than these values there is packet loss" (us, as a range where the paper gives one).
KNEE = {"sk-370dle-32": ((20.0, 21.0), "§4.1.2"), "sk-370dle-64": ((17.0, 17.0), "§4.1.2"),
        "sk-p4dp6": ((20.0, 21.0), "§6.1.2")}
#: Configurations the paper says lost nothing in their throughput tests.
NO_LOSS = {"intel-p4dp6": "§6.2.2", "intel-p4dp8": "§7.2.1",
           # "packet loss was only observed for packets less than 100 bytes long at spacing of 10 us or less"
           "alteon-370dle-32": "§4.3.2", "alteon-370dle-64": "§4.3.2"}
#: "the receiving CPU was loaded at between 65 - 100% when the frames were spaced at 13 us or less" (370DLE).
CPU_AT_13US = {"sk-370dle-32": "§4.1.2", "sk-370dle-64": "§4.1.2", "intel-370dle-64": "§4.2.2",
               "alteon-370dle-32": "§4.3.2", "alteon-370dle-64": "§4.3.2"}
#: "average CPU utilisation on the receiving PC was ~20% for packets greater than 1000 bytes".
CPU_LARGE = {"sk-p4dp6": "§6.1.2", "intel-p4dp6": "§6.2.2", "intel-p4dp8": "§7.2.1"}
#: "... and 30-40 % for smaller packets" (P4DP6), "~30 % for smaller packets" (P4DP8): (section, low, high).
CPU_SMALL = {"sk-p4dp6": ("§6.1.2", 30.0, 40.0), "intel-p4dp6": ("§6.2.2", 30.0, 40.0),
             "intel-p4dp8": ("§7.2.1", 30.0, None)}
#: Request-response slope (us/byte) and intercept (us) the paper gives, by configuration, with sections.
LATENCY = {
    "sk-370dle-32": ("§4.1.1", 0.0286, 62.0), "sk-370dle-64": ("§4.1.1", 0.023, 56.0),
    "intel-370dle-64": ("§4.2.1", 0.018, 168.0), "alteon-370dle-32": ("§4.3.1", 0.023, None),
    "alteon-370dle-64": ("§4.3.1", 0.014, 230.0), "intel-das": ("§5.2.1", 0.0206, 180.0),
    "sk-p4dp6": ("§6.1.1", 0.0199, 62.0), "intel-p4dp6": ("§6.2", 0.009, None), "sk-p4dp8": ("§7.1.1", 0.022, None),
}
#: The round trips' full width at half maximum: ~2 us in general (§3.1), 1.5 us at every size on the P4DP6 with
#: the Intel PRO/1000 (§6.2, its histograms of 64, 512, 1024 and 1400 bytes).
FWHM_GENERAL_US = 2.0
FWHM_P4DP6_INTEL_US = 1.5
FWHM_P4DP6_SIZES = (64, 512, 1024, 1400)

#: Rows the paper contradicts, by (configuration or host, quantity): the paper's own numbers that disagree.
FWHM_ON_THE_P4DP6 = (
    "The paper's general ~2 us (§3.1) cites figure 6.4, the round trips of the SuperMicro P4DP6, whose histograms "
    "it gives as 1.5 us wide at every size (§6.2); the model's host noise on this board follows §6.2.")
CONTRADICTED = {
    ("supermicro-p4dp6", "round-trip FWHM, median over the sizes"): FWHM_ON_THE_P4DP6,
    ("supermicro-p4dp8-g2", "round-trip FWHM, median over the sizes"): FWHM_ON_THE_P4DP6,
    ("intel-p4dp6", "request-response slope"):
        "The paper's 0.009 us/byte is below the 0.0118 us/byte of the PCI and wire transfers alone (§3.1), which no "
        "store-and-forward path can beat; the paper calls it in agreement \"making rough allowance for the steps\" "
        "(§6.2).",
    ("sk-p4dp6", "smallest spacing without loss, 1472 B"):
        "The paper's 876 Mbit/s (§6.1.2, fig. 9.1) is a 1532-byte wire packet every 14.0 us, which cannot be reached "
        "at the 20-21 us spacing it names for it (584-613 Mbit/s): the sentence repeats §4.1.2's for the 370DLE.",
    ("sk-p4dp6", "max throughput, 1472 B"):
        "The paper gives 876 Mbit/s (§6.1.2, fig. 9.1), a 1532-byte wire packet every 14.0 us, \"at a spacing of "
        "20-21 us\", which gives 584-613 Mbit/s; it names no cause: the receiving CPU ~20% loaded (§6.1.2), the "
        "register refusals not prolonging \"the PCI usage by much as confirmed by the 876 Mbit/s\" (§6.1.3), and the "
        "same board, bus and kernel carry 950 Mbit/s with the Intel PRO/1000 (§6.2.2) and 990 with the later "
        "SK-9843 revision (§7.1.2).",
    ("intel-370dle-64", "period of the PAUSE gaps"):
        "The paper's own numbers leave the e1000 no reason to stop the stream: a receive interrupt every ~10 frames "
        "(~120 us, §4.2.1) returns descriptors long before the driver's 80 (its least) are used, and the receive bus "
        "moves a frame in ~3.25 us of the 11 (§4.2.3), so the receive FIFO cannot fill to XOFF; a transmit interrupt "
        "every ~33 frames (~400 us, §4.2.1) frees the sender's ring long before it fills. And the order seen, the "
        "sending bus stopping first (§4.2.3), is not that of a PAUSE from a receiver out of descriptors, whose own "
        "DMA stops first.",
    ("alteon-370dle-64", "request-response intercept"):
        "The paper's ~230 us intercept (§4.3.1) is less than the two ~120 us receive coalescence waits its own "
        "interrupt counts give a round trip (one interrupt per ~10 packets received, ~120 us, §4.3.1): 240 us before "
        "any software, DMA or wire time (the SK-9843 round trip has 56 us of those on the same host, §4.1.1).",
}


def _throughput(key: str, cfg: Config, sizes: Sizes) -> Measurement:
    def rows(reports: list[Report]) -> Iterator[Row]:
        rep = reports[0]
        best = rep.best(FULL_FRAME)
        seed, sec = MAX_THROUGHPUT[key]
        user = _number(best.get("best user rate (Mbit/s)"))
        ci = _number(best.get("best ± 95% (Mbit/s)"))
        yield Row(key, "max throughput, 1472 B", cite(sec), "Mbit/s", seed, wire_rate_mbps(user, FULL_FRAME),
                  wire_rate_mbps(ci, FULL_FRAME), note=CONTRADICTED.get((key, "max throughput, 1472 B"), ""))
        if key in REQUOTED_THROUGHPUT:
            seed, sec, note = REQUOTED_THROUGHPUT[key]
            yield Row(key, "max throughput, 1472 B", cite(sec), "Mbit/s", seed, wire_rate_mbps(user, FULL_FRAME),
                      wire_rate_mbps(ci, FULL_FRAME), note=note)
        points = rep.points(FULL_FRAME)
        if key in KNEE:
            (lo, hi), sec = KNEE[key]
            q = "smallest spacing without loss, 1472 B"
            yield Row(key, q, cite(sec), "us", lo, _number(best.get("no loss from (us)")),
                      note=CONTRADICTED.get((key, q), ""), seed_high=hi if hi != lo else None)
        if key in NO_LOSS:
            sent = sum(_number(p["sent"]) for p in points)
            lost = sum(_number(p["lost"]) for p in points)
            yield Row(key, "packets lost over the spacing sweep, 1472 B", cite(NO_LOSS[key]), "%", 0.0,
                      100.0 * lost / sent if sent else math.nan, scale=100.0)
        if key in CPU_AT_13US:
            at = next((p for p in points if p["spacing (us)"] == 13.0), None) or next(
                (p for p in points if 0 < p["spacing (us)"] <= 13.0), {})
            yield Row(key, "receiving CPU load at 13 us spacing, 1472 B", cite(CPU_AT_13US[key]), "%", 65.0,
                      100.0 - _number(at.get("receiver CPU idle (%)")), seed_high=100.0, scale=100.0)
        if key in CPU_LARGE:
            yield Row(key, "receiving CPU load at the best throughput, 1472 B", cite(CPU_LARGE[key]), "%", 20.0,
                      _load_at_best(rep, FULL_FRAME), scale=100.0)
    return Measurement((stream_sweep(key, cfg, sizes),), rows)


def _load_at_best(rep: Report, size: int) -> float:
    """The receiving CPU's load (%) at the spacing where ``size``'s throughput was best: 100% less its idle share."""
    best = rep.best(size)
    at = next((p for p in rep.points(size) if p["spacing (us)"] == best.get("at spacing (us)")), {})
    return 100.0 - _number(at.get("receiver CPU idle (%)"))


def _cpu_small(key: str, cfg: Config, sizes: Sizes) -> Measurement:
    """The receiving CPU's load with packets under 1000 bytes, where the paper gives it apart from the larger ones'
    ~20%: each of the sizes standing for them at its best throughput, the median over them."""
    def rows(reports: list[Report]) -> Iterator[Row]:
        sec, low, high = CPU_SMALL[key]
        loads = sorted(_load_at_best(reports[0], n) for n in sizes.small_sizes)
        listed = ", ".join(map(str, sizes.small_sizes))
        yield Row(key, f"receiving CPU load at the best throughput, under 1000 B (median of {listed} B)", cite(sec),
                  "%", low, loads[len(loads) // 2], seed_high=high, scale=100.0)
    return Measurement((stream_sweep(key, cfg, sizes, packet_sizes=sizes.small_sizes, name="sweep-small"),), rows)


def _latency(key: str, cfg: Config, sizes: Sizes) -> Measurement:
    def rows(reports: list[Report]) -> Iterator[Row]:
        rep = reports[0]
        section, slope, intercept = LATENCY[key]
        line = rep.line()
        q = "request-response slope"
        yield Row(key, q, cite(section), "us/B", slope, _number(line.get("slope (us/byte)")),
                  _number(line.get("slope ± 95% (us/byte)")), note=CONTRADICTED.get((key, q), ""))
        if intercept is not None:
            q = "request-response intercept"
            yield Row(key, q, cite(section), "us", intercept, _number(line.get("intercept (us)")),
                      _number(line.get("intercept ± 95% (us)")), note=CONTRADICTED.get((key, q), ""))
        if key == "intel-p4dp6":
            widths = _widths(reports[1])
            for size in FWHM_P4DP6_SIZES:
                w, ci = widths.get(size, (math.nan, math.nan))
                yield Row(key, f"round-trip FWHM, {size} B", cite("§6.2"), "us", FWHM_P4DP6_INTEL_US, w, ci)
        else:
            widths = _widths(rep)
            w = sorted(v for v, _ in widths.values() if math.isfinite(v))
            median = w[len(w) // 2] if w else math.nan
            q = "round-trip FWHM, median over the sizes"
            yield Row(key, q, cite("§3.1"), "us", FWHM_GENERAL_US, median, note=CONTRADICTED.get((cfg.host, q), ""))
    # §6.2's histograms are of four sizes: those, with round trips enough for a width known to a few per cent.
    widths = (latency_run(key, cfg, sizes, name="fwhm", response_sizes=",".join(map(str, FWHM_P4DP6_SIZES)),
                          count=sizes.fwhm_count),) if key == "intel-p4dp6" else ()
    return Measurement((latency_run(key, cfg, sizes), *widths), rows)


def _widths(rep: Report) -> dict[int, tuple[float, float]]:
    """A latency report's round-trip FWHM and its 95% half-width (us), by response size (bytes)."""
    return {r["size (bytes)"]: (_number(r["FWHM (us)"]), _number(r["FWHM ± 95% (us)"])) for r in rep.per_size()}


def _trace_sk(key: str, cfg: Config, sizes: Sizes) -> Measurement:
    """§4.1.3: spaced 1400-byte frames on the 370DLE's 64/66 bus; fig. 4.4: the same at 10 us spacing."""
    def rows(reports: list[Report]) -> Iterator[Row]:
        spaced, fast = reports
        sec = cite("§4.1.3")
        yield Row(key, "send DMA of a 1400-byte frame's data", sec, "us", 3.0,
                  spaced.bus("fetch per frame, its data alone, median", "send_pci"))
        yield Row(key, "first word on send PCI to first word on receive PCI", sec, "us", 23.0,
                  spaced.timeline_median("first word -> first word (us)"))
        yield Row(key, "frame on the medium, 1400 B", sec, "us", 11.6, spaced.timeline_median("on the wire (us)"))
        yield Row(key, "software send to receive (CSR setup to receive service)", sec, "us", 36.0,
                  spaced.timeline_median("sender's CSR -> receiver's service (us)"))
        yield Row(key, "frames per interrupt, sending", cite("§4.1.1"), "frames", 1.0,
                  spaced.bus("frames per interrupt", "send_pci"))
        yield Row(key, "frames per interrupt, receiving", cite("§4.1.1"), "frames", 1.0,
                  spaced.bus("frames per interrupt", "recv_pci"))
        wire = next((r for r in fast.table("Data frames on the link") if r["direction"] == "from the sending host"), {})
        yield Row(key, "frame period on the wire at 10 us transmit spacing, 1400 B", cite("§4.1.3, fig. 4.4"), "us",
                  11.7, _number(wire.get("period, median (us)")))
    return Measurement((recorded_stream(key, cfg, "spaced", 1400, 40.0, sizes.trace_count),
                        recorded_stream(key, cfg, "10us", 1400, 10.0, 4 * sizes.trace_count)), rows)


def _software_sk(key: str, cfg: Config, sizes: Sizes) -> Measurement:
    """§4.1.3's figures that add the trace's times to others: the frame on the receiving bus "some 27 us" after the
    send's CSR setup began (fig. 4.3, the 23 us from first word to first word and the send's setup before it), and
    the "~10 us on each 800 MHz CPU" of IP stack and application (§9: "10 us per node"), which the report derives
    from a round trip's intercept as the paper does. The runs are those of the trace and the round trips."""
    def rows(reports: list[Report]) -> Iterator[Row]:
        spaced, lat = reports
        descriptor = (spaced.bus("fetch per frame (descriptor + data), median", "send_pci")
                      - spaced.bus("fetch per frame, its data alone, median", "send_pci"))
        to_first_word = (spaced.timeline_median("sender's CSR setup (us)")
                         + spaced.bus("CSR setup end -> fetch, median", "send_pci") + descriptor)
        yield Row(key, "send's CSR setup to first word on receive PCI, 1400 B", cite("§4.1.3"), "us", 27.0,
                  to_first_word + spaced.timeline_median("first word -> first word (us)"))
        yield Row(key, "IP stack and application per node, (intercept - software send to receive) / 2",
                  cite("§4.1.3, §9"), "us", 10.0,
                  host_software_time_us(_number(lat.line().get("intercept (us)")),
                                        spaced.timeline_median("sender's CSR -> receiver's service (us)")))
    return Measurement((_trace_sk(key, cfg, sizes).runs[0], latency_run(key, cfg, sizes)), rows)


def _request_intel(key: str, cfg: Config, sizes: Sizes) -> Measurement:
    """§4.2.3, fig. 4.7: a 64-byte request and a 1400-byte response on the 370DLE with the Intel PRO/1000."""
    def rows(reports: list[Report]) -> Iterator[Row]:
        rep = reports[0]
        sec = cite("§4.2.3")
        yield Row(key, "CSR setup before sending the request", sec, "us", 1.75,
                  rep.bus("CSR setup per send, median", "send_pci"))
        yield Row(key, "DMA of the 64-byte request's data", sec, "us", 0.25,
                  rep.bus("fetch per frame, its data alone, median", "send_pci"))
        for side, name in (("send", "send_pci"), ("receive", "recv_pci")):
            yield Row(key, f"PCI transfer to CSR update, {side} side", sec, "us", 70.0,
                      rep.bus(TIMER_ROW, name) + rep.bus("INTA# -> CSR update, median", name))
    return Measurement((recorded_latency(key, cfg, "request", 1400, sizes.trace_count),), rows)


#: The bus figures of 1400-byte streams (§4.2.3 and §5.2.3 at 11 us spacing; §6.2.3 "at wire speed"): send busy
#: per frame (us) and its share, receive busy per frame and its share.
WIRE_SPEED = {"intel-370dle-64": ("§4.2.3", 4.7, 43, 3.25, 30), "intel-das": ("§5.2.3", 9.3, 82, 5.9, 50),
              "intel-p4dp6": ("§6.2.3", 6.2, 50, 3.0, 25)}


def usage_note(busy_us: float, pct: float, period_us: float) -> str:
    """The paper's own disagreement when its usage percentage is not its busy time over the frame period."""
    own = 100 * busy_us / period_us
    if abs(own - pct) / pct <= TOLERANCE:
        return ""
    return (f"The paper's own {busy_us:g} us per {period_us:.3g} us frame period is {own:.0f}%, not its ~{pct:g}%; "
            "the busy time's row holds the model to the time.")


def _wire_speed(key: str, cfg: Config, sizes: Sizes) -> Measurement:
    def rows(reports: list[Report]) -> Iterator[Row]:
        rep = reports[0]
        sec, s_us, s_pct, r_us, r_pct = WIRE_SPEED[key]
        at_wire = key == "intel-p4dp6"
        wire = next((r for r in rep.table("Data frames on the link") if r["direction"] == "from the sending host"), {})
        period = _number(wire.get("period, median (us)")) if at_wire else 11.0
        paper_period = (1400 + 66) * 8 / 1000 if at_wire else 11.0
        per = "frame period on the wire" if at_wire else "11 us spacing"
        send = rep.bus("bus busy per frame", "send_pci")
        recv = rep.bus("bus busy per frame", "recv_pci")
        yield Row(key, f"send PCI busy per 1400-byte frame at {'wire speed' if at_wire else '11 us spacing'}",
                  cite(sec), "us", s_us, send)
        yield Row(key, f"send PCI usage (busy per frame / {per})", cite(sec), "%", s_pct, 100 * send / period,
                  note=usage_note(s_us, s_pct, paper_period))
        yield Row(key, "receive PCI busy per frame", cite(sec), "us", r_us, recv)
        yield Row(key, f"receive PCI usage (busy per frame / {per})", cite(sec), "%", r_pct, 100 * recv / period,
                  note=usage_note(r_us, r_pct, paper_period))
        if key == "intel-370dle-64":
            q = "period of the PAUSE gaps"
            yield Row(key, q, cite("§4.2.3"), "us", 900.0, _number(rep.item("PAUSE period, median")),
                      note=CONTRADICTED.get((key, q), ""))
        if key == "intel-p4dp6":
            # fig. 6.6: one 1400-byte frame sent, its setup not shared with the DMA of the frame before
            spaced = reports[1]
            yield Row(key, "receive DMA of a 1400-byte frame (data + descriptor)", cite(sec), "us", 2.9,
                      spaced.bus("receive per frame (data + descriptor), median", "recv_pci"))
            yield Row(key, "PCI busy setting up the CSRs for a send", cite(sec), "us", 2.0,
                      spaced.bus("CSR setup per send, median", "send_pci"))
    runs = [recorded_stream(key, cfg, "wirespeed", 1400, 0.0 if key == "intel-p4dp6" else 11.0,
                            sizes.wire_speed_count)]
    if key == "intel-p4dp6":
        runs.append(recorded_stream(key, cfg, "spaced", 1400, 40.0, sizes.trace_count))
    return Measurement(tuple(runs), rows)


#: The throughput tests' interrupt counts: section, frames sent per interrupt and the interval (us) between those
#: interrupts, the same received (None: the paper gives no interval). §4.1.1 of the SK-9843 on the 370DLE's buses:
#: "the NIC interrupts the CPU for each packet sent and received"; §6.1.1 of it on the P4DP6: "one interrupt per
#: packet sent and received".
INTERRUPTS = {"intel-370dle-64": ("§4.2.1", 33.0, 400.0, 10.0, 120.0),
              "alteon-370dle-64": ("§4.3.1", 33.0, 400.0, 10.0, 120.0),
              "sk-370dle-32": ("§4.1.1", 1.0, None, 1.0, None), "sk-p4dp6": ("§6.1.1", 1.0, None, 1.0, None)}


def _interrupts(key: str, cfg: Config, sizes: Sizes) -> Measurement:
    """"one interrupt for approximately every 33 (~400 us) packets sent and one interrupt for every 10 packets
    received (~120 us)" (§4.2.1, §4.3.1): the throughput tests' full frames, at the wire's pace. The times are
    those of the frames between two interrupts, which is what a count of interrupts over a stream gives: the
    interval from one interrupt to the next, not a timer's setting. A NIC that interrupts for every frame shows it
    in a few frames."""
    sec, sent, sent_us, received, received_us = INTERRUPTS[key]
    coalesced = sent > 1
    pace = "at wire speed" if coalesced else "sent every 12 us"

    def rows(reports: list[Report]) -> Iterator[Row]:
        rep = reports[0]
        yield Row(key, f"frames sent per interrupt, 1472 B {pace}", cite(sec), "frames", sent,
                  rep.bus("frames per interrupt", "send_pci"))
        if sent_us is not None:
            yield Row(key, "interval between transmit interrupts", cite(sec), "us", sent_us,
                      rep.bus(INTERVAL_ROW, "send_pci"))
        yield Row(key, f"frames received per interrupt, 1472 B {pace}", cite(sec), "frames", received,
                  rep.bus("frames per interrupt", "recv_pci"))
        if received_us is not None:
            yield Row(key, "interval between receive interrupts", cite(sec), "us", received_us,
                      rep.bus(INTERVAL_ROW, "recv_pci"))
    count = sizes.wire_speed_count // 3 if coalesced else 4 * sizes.trace_count
    return Measurement((recorded_stream(key, cfg, "interrupts", FULL_FRAME, 12.0, count),), rows)


def _bus_32_33(key: str, cfg: Config, sizes: Sizes) -> Measurement:
    """§9: "A 33bit 32 MHz PCI bus has almost 100% occupancy and the tests indicate a maximum throughput of ~670
    Mbit/s" (the Alteon on the 370DLE's 32-bit bus, 674 Mbit/s, §4.3.2): the sending bus at full load."""
    def rows(reports: list[Report]) -> Iterator[Row]:
        yield Row(key, "sending PCI busy at the maximum throughput", cite("§9"), "%", 90.0,
                  reports[0].bus("bus busy", "send_pci"), seed_high=100.0, scale=100.0)
    return Measurement((recorded_stream(key, cfg, "full", FULL_FRAME, 0.0, sizes.wire_speed_count // 3),), rows)


#: §8's hosts: PC1 (800 MHz) sends with TxInt on its NIC, PC2 (2.0 GHz) receives with RxInt on its NIC.
SEC8_UNIT_US = 1.024


def _host_with_nic(host: str, nic: str, folder: Path, name: str, **settings: float) -> str:
    """A copy of built-in ``host``'s profile with ``settings`` of its ``nic`` changed: a TOML file in ``folder``,
    as a user writes one to try a driver option."""
    values = profiles.raw("host", host)
    values["nic"] = {**values.get("nic", {}), nic: {**values.get("nic", {}).get(nic, {}), **settings}}
    path = folder / f"{name}.toml"
    path.write_text(profiles.to_toml(values), encoding="utf-8")
    return str(path)


def _coalescence(key: str, cfg: Config, sizes: Sizes, folder: Path) -> Measurement:
    """§8: the round trip against PC2's RxInt (TxInt 64 on PC1), and the best throughput against it."""
    # Fig. 8.1's round trips grow by PC2's RxInt alone when PC1's transmit interrupt has come before the response
    # (its e1000 cleans both rings at any interrupt): TxInt 0 on PC1; fig. 8.2's throughputs had TxInt 64 (§8).
    pc1_rtt = _host_with_nic(cfg.host, cfg.nic, folder, "sec8-pc1-tx0", tx_int_delay_us=0.0)
    pc1 = _host_with_nic(cfg.host, cfg.nic, folder, "sec8-pc1-tx64", tx_int_delay_us=64 * SEC8_UNIT_US)
    # PC2 is a 2.0 GHz PC, not the P4DP6 whose host profile stands in for it: its e1000 keeps the driver's own
    # absolute timers (the NIC profile's), not fig. 9.1's 70 us for that board.
    e1000 = profiles.load("nic", cfg.nic)
    pc2 = {r: _host_with_nic(cfg.recv_host or cfg.host, cfg.nic, folder, f"sec8-pc2-rx{r}",
                             rx_int_delay_us=r * SEC8_UNIT_US, tx_abs_int_delay_us=e1000.tx_abs_int_delay_us,
                             rx_abs_int_delay_us=e1000.rx_abs_int_delay_us)
           for r in sorted({*sizes.rxint_latency, *sizes.rxint_stream})}
    lat = [latency_run(key, cfg, sizes, host=pc1_rtt, recv_host=pc2[r], name=f"rtt-rx{r}") for r in sizes.rxint_latency]
    tput = [stream_sweep(key, cfg, sizes, host=pc1, recv_host=pc2[r], name=f"sweep-rx{r}") for r in sizes.rxint_stream]

    def rows(reports: list[Report]) -> Iterator[Row]:
        intercepts = {r: _number(rep.line().get("intercept (us)")) for r, rep in zip(sizes.rxint_latency, reports)}
        for a, b in zip(sizes.rxint_latency, sizes.rxint_latency[1:]):
            yield Row(key, f"round trip with RxInt {b} less with RxInt {a} (intercepts)", cite("§8, fig. 8.1"), "us",
                      (b - a) * SEC8_UNIT_US, intercepts[b] - intercepts[a])
        best = {r: _number(rep.best(FULL_FRAME).get("best user rate (Mbit/s)"))
                for r, rep in zip(sizes.rxint_stream, reports[len(lat):])}
        top = max(best.values())
        for r in sizes.rxint_stream:
            if r >= 20:
                yield Row(key, f"best throughput with RxInt {r} over the best of the sweep, 1472 B",
                          cite("§8, fig. 8.2"), "", 1.0, best[r] / top)
    return Measurement((*lat, *tput), rows)


#: What is measured on which configuration, in the order of the paper's sections.
PLAN: tuple[tuple[str, Callable[..., Measurement]], ...] = (
    *((k, _throughput) for k in MAX_THROUGHPUT),
    *((k, _cpu_small) for k in CPU_SMALL),
    *((k, _latency) for k in LATENCY),
    ("sk-370dle-64", _trace_sk),
    ("sk-370dle-64", _software_sk),
    ("intel-370dle-64", _request_intel),
    ("intel-370dle-64", _wire_speed),
    ("intel-370dle-64", _interrupts),
    ("alteon-370dle-64", _interrupts),
    ("sk-370dle-32", _interrupts),
    ("sk-p4dp6", _interrupts),
    ("intel-das", _wire_speed),
    ("intel-p4dp6", _wire_speed),
    ("intel-sec8", _coalescence),
    ("alteon-370dle-32", _bus_32_33),
)


def calibrate(sizes: Sizes = Sizes(), *, only: set[str] | None = None, jobs: int = 2,
              progress: Callable[[int, int, str], None] | None = None,
              plan: Sequence[tuple[str, Callable[..., Measurement]]] = PLAN) -> list[Row]:
    """Run every measurement of ``plan`` (those of configurations in ``only``) through the user's commands,
    ``jobs`` runs at a time; the rows in the paper's order."""
    chosen = [(k, f) for k, f in plan if only is None or k in only]
    with tempfile.TemporaryDirectory(prefix="nicrig-calibration-") as tmp:
        folder = Path(tmp)
        measurements = []
        for key, make in chosen:
            extra = (folder,) if make is _coalescence else ()
            measurements.append((key, make(key, CONFIGS[key], sizes, *extra)))
        # a run two measurements share (the same name, the same arguments) is run once
        unique: dict[str, Run] = {}
        for run in (r for _, m in measurements for r in m.runs):
            if unique.setdefault(run.name, run) != run:
                raise ValueError(f"two different runs are named {run.name}")
        runs = list(unique.values())
        done = 0

        def one(run: Run) -> Report:
            nonlocal done
            rep = Report(report_of(run, folder))
            done += 1
            if progress:
                progress(done, len(runs), run.name)
            return rep
        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            reports = dict(zip([r.name for r in runs], pool.map(one, runs)))
    rows: list[Row] = []
    for _, m in measurements:
        rows.extend(m.rows([reports[r.name] for r in m.runs]))
    return rows


def summary(rows: Sequence[Row]) -> dict[str, int]:
    """How many rows fall within 5%, within 10%, beyond with the paper's disagreeing numbers, and beyond (faults)."""
    return {"rows": len(rows), "within_5pct": sum(r.within == TOLERANCE for r in rows),
            "within_10pct": sum(r.within <= LIMIT for r in rows),
            "beyond_explained": sum(r.within > LIMIT and bool(r.note) for r in rows),
            "beyond_unexplained": sum(r.within > LIMIT and not r.note for r in rows)}
