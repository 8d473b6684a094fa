#!/usr/bin/env python3
"""Benchmark: what a hostile input file costs, per kind, against its size.

For each kind of hostile file nicrig has met (deeply nested VCD scopes, a file of one endless line, a
dataset declaring far more rows than the file stores, a header declaring hundreds of thousands of variables), files of
growing size are built in a temporary folder and the command a user runs on them (``nicrig import``,
``nicrig verify``, ``nicrig info``, ``nicrig report``) runs in a child process. Measured per run, from
the kernel's accounting of the child (through GNU time): the work, CPU seconds (user + system), and the peak
resident size, whole and (``+MB``) less that of the same command on a small well-formed file of the kind
(the interpreter and libraries). Where one is installed, a peer reads the same file in the same run:
GTKWave's ``vcd2fst`` for the VCDs, sigrok-cli's CSV input for the CSV, HDF5's ``h5dump -H`` for the HDF5
files; the ratios ``x CPU`` and ``x MB`` are nicrig's CPU time and peak resident size over the peer's, both
whole processes (nicrig's include starting Python, about 0.4 s and 45 MB).

It prints, per kind, a row per size and the constants: work per MB of file and memory per MB of file at
the largest size, and how each grew from the smallest size to the largest against the file (1.0: in
proportion; below: less than in proportion, as for a file refused at a limit). Every kind must be at most
linear: work and memory growing as the file's size to a power of at most 1.25 (a quadratic cost shows as 2).
Paste the output into docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from hostile import declared, nested_vcd, one_long_line  # noqa: E402 (the tests' folder first)

MB = 1 << 20
#: The peers hold a file of one line whole (sigrok-cli: 22 bytes of memory a byte): not run on larger files.
PEER_MAX_BYTES = 64 * MB
NICRIG = [sys.executable, "-m", "nicrig"]


@dataclass
class Run:
    seconds: float  # CPU, user + system
    peak_mb: float  # peak resident size
    code: int


def measure(argv: list[str]) -> Run:
    """Run ``argv`` in a child, its CPU time and peak resident size from the kernel's accounting of it, through
    GNU time: a child forked from this process would start from this process's resident size (kept across
    exec), a floor of some 45 MB under a peer's own peak."""
    with tempfile.NamedTemporaryFile("r", suffix=".time") as report:
        proc = subprocess.run(["/usr/bin/time", "-f", "%U %S %M %x", "-o", report.name, *argv],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        err = proc.stderr.decode(errors="replace")
        if "Traceback" in err:
            raise SystemExit(f"{' '.join(argv)}: a traceback:\n{err}")
        lines = report.read().splitlines()
    user, system, peak_kb, code = lines[-1].split()
    if lines[0].startswith("Command terminated by signal"):
        code = f"-{lines[0].split()[-1]}"  # as subprocess gives a child killed by a signal
    return Run(float(user) + float(system), int(peak_kb) / 1024, int(code))


# -- the hostile files (tests/hostile.py makes them for the tests too) --------------------------------------
def nested(path: Path, size: int, name: str = "") -> Path:
    """256-deep scopes around a variable, repeated until the file is about ``size`` bytes (other scope names each
    time; with ``name``, one chain of 256 levels all called so)."""
    per_repeat = 256 * 40
    return nested_vcd(path, 256, 1 if name else max(1, size // per_repeat), name)


def deep_vcd(path: Path, size: int) -> Path:
    """One chain of nested scopes, as deep as ``size`` bytes make it (50,000 levels in 1.75 MB)."""
    depth = size // 38
    path.write_text("$timescale 1 ns $end\n" + "$scope module m $end\n" * depth + "$var wire 1 ! a $end\n"
                    + "$upscope $end\n" * depth + "$enddefinitions $end\n#0\n0!\n#10\n1!\n")
    return path


def many_variables(path: Path, size: int) -> Path:
    """A header declaring variables until it is about ``size`` bytes (refused: more than a source holds)."""
    n = size // 24
    with open(path, "w") as f:
        f.write("$timescale 1 ns $end\n$scope module top $end\n")
        f.writelines(f"$var wire 1 v{i} s{i} $end\n" for i in range(n))
        f.write("$upscope $end\n$enddefinitions $end\n#0\n0v0\n")
    return path


def small_capture(folder: Path) -> Path:
    """A small simulated capture set (latency, SK-9843 on PCI 32/33, AD recorded, timing-mode buses)."""
    path = folder / "cap.h5"
    if not path.exists():
        subprocess.run([*NICRIG, "simulate", "--scenario", "latency", "--nic", "sk9843", "--bus", "pci32-33",
                        "--with-ad", "--size", "1400", "--count", "6", "--rounds", "1", "--samples-per-clock", "2",
                        "-o", str(path)], check=True, capture_output=True)
    return path


def declaring(folder: Path, rows: int, dataset: str = "sources/send_pci/samples") -> Path:
    """The small capture with ``dataset`` declaring ``rows`` rows, none stored beyond what it held."""
    path = folder / f"declared-{rows}.h5"
    shutil.copy(small_capture(folder), path)
    declared(path, dataset, rows)
    return path


@dataclass
class Kind:
    name: str
    command: Callable[[Path, Path], list[str]]  # (file, folder) -> argv
    build: Callable[[Path, int], Path]  # (path, size) -> the file
    sizes: list[int]  # bytes, or declared rows for the declaring kinds
    suffix: str
    baseline: Callable[[Path], Path]  # a small well-formed file of the kind
    peer: Callable[[Path, Path], list[str]] | None = None
    by_rows: bool = False  # sizes are declared rows: the file itself does not grow


def tiny_vcd(folder: Path) -> Path:
    path = folder / "tiny.vcd"
    path.write_text("$timescale 1 ns $end\n$scope module top $end\n$var wire 1 ! a $end\n$upscope $end\n"
                    "$enddefinitions $end\n#0\n0!\n#10\n1!\n")
    return path


def tiny_csv(folder: Path) -> Path:
    path = folder / "tiny.csv"
    path.write_text("; Samplerate: 1 MHz\nA,B\n0,1\n1,0\n")
    return path


def importing(path: Path, folder: Path, *extra: str) -> list[str]:
    out = folder / "out.h5"
    out.unlink(missing_ok=True)
    return [*NICRIG, "import", str(path), "-o", str(out), *extra]


def vcd2fst(path: Path, folder: Path) -> list[str]:
    return ["vcd2fst", str(path), str(folder / "out.fst")]


def h5dump(path: Path, folder: Path) -> list[str]:
    return ["h5dump", "-H", str(path)]


def sigrok_csv(path: Path, folder: Path) -> list[str]:
    """sigrok-cli's CSV input (libsigrok 0.5), the rate given as nicrig's import reads it from the comment."""
    return ["sigrok-cli", "-I", "csv:samplerate=1000000", "-i", str(path), "-O", "bits", "-o", os.devnull]


def kinds(quick: bool) -> list[Kind]:
    scale = 1 if not quick else 4
    csv_head = "; Samplerate: 1 MHz\nA,B\n0,1\n"
    vcd_head = ("$timescale 1 ns $end\n$scope module top $end\n$var wire 1 ! a $end\n$upscope $end\n"
                "$enddefinitions $end\n#0\n0!\n")
    peer_vcd = vcd2fst if shutil.which("vcd2fst") else None
    peer_h5 = h5dump if shutil.which("h5dump") else None
    peer_csv = sigrok_csv if shutil.which("sigrok-cli") else None
    return [
        Kind("VCD, 256-deep scopes, repeated", lambda p, d: importing(p, d),
             lambda p, n: nested(p, n), [MB // scale, 2 * MB // scale, 4 * MB // scale], ".vcd", tiny_vcd,
             peer_vcd),
        Kind("VCD, one chain of nested scopes (refused past 256)", lambda p, d: importing(p, d),
             deep_vcd, [MB // scale, 2 * MB // scale, 4 * MB // scale], ".vcd", tiny_vcd, peer_vcd),
        Kind("VCD, --scope m.m in 256 levels of m (ambiguous)", lambda p, d: importing(p, d, "--scope", "m.m"),
             lambda p, n: nested(p, n, name="m"), [10_000], ".vcd", tiny_vcd),
        Kind("VCD, a header flooded with variables (refused)", lambda p, d: importing(p, d),
             many_variables, [4 * MB // scale, 8 * MB // scale, 16 * MB // scale], ".vcd", tiny_vcd, peer_vcd),
        Kind("CSV, one endless line (refused at 1 MiB)", lambda p, d: importing(p, d),
             lambda p, n: one_long_line(p, csv_head, n), [25 * MB // scale, 100 * MB // scale, 200 * MB // scale],
             ".csv", tiny_csv, peer_csv),
        Kind("VCD, one endless body line (refused at 1 MiB)", lambda p, d: importing(p, d),
             lambda p, n: one_long_line(p, vcd_head, n), [25 * MB // scale, 100 * MB // scale], ".vcd", tiny_vcd,
             peer_vcd),
        Kind("capture declaring N samples: verify", lambda p, d: [*NICRIG, "verify", str(p)],
             lambda p, n: declaring(p.parent, n), [1 << 20, 1 << 30, 1 << 40], ".h5",
             lambda d: small_capture(d), peer_h5, by_rows=True),
        Kind("capture declaring N samples: info", lambda p, d: [*NICRIG, "info", str(p)],
             lambda p, n: declaring(p.parent, n), [1 << 20, 1 << 30, 1 << 40], ".h5", lambda d: small_capture(d),
             by_rows=True),
        Kind("results/latency/rtt declaring N rows: report",
             lambda p, d: [*NICRIG, "report", str(p), "-o", str(d / "r.json")],
             lambda p, n: declaring(p.parent, n, "results/latency/rtt"), [1 << 20, 1 << 34], ".h5",
             lambda d: small_capture(d), by_rows=True),
    ]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="files a quarter of the size (a smoke run)")
    args = ap.parse_args()
    verdicts: list[str] = []
    with tempfile.TemporaryDirectory(prefix="nicrig-hostile-") as tmp:
        folder = Path(tmp)
        print(f"{'kind and size':58} {'file MB':>8} {'CPU s':>7} {'peak MB':>8} {'+MB':>7} {'exit':>4}  "
              f"{'peer':8} {'CPU s':>7} {'peak MB':>8} {'exit':>4} {'x CPU':>6} {'x MB':>6}")
        for kind in kinds(args.quick):
            base = measure(kind.command(kind.baseline(folder), folder))
            points = []
            for n in kind.sizes:
                path = kind.build(folder / f"hostile{kind.suffix}", n) if not kind.by_rows else kind.build(
                    folder / "x.h5", n)
                size = path.stat().st_size
                run = measure(kind.command(path, folder))
                extra = max(0.0, run.peak_mb - base.peak_mb)
                peer = ""
                if kind.peer is not None and size <= PEER_MAX_BYTES:
                    argv = kind.peer(path, folder)
                    p = measure(argv)
                    # nicrig's cost over the peer's on the same file, both whole (interpreter and libraries
                    # included), so below 1 nicrig's checks cost less than the peer merely reading the file
                    peer = (f"{Path(argv[0]).name:8} {p.seconds:7.2f} {p.peak_mb:8.1f} {p.code:>4} "
                            f"{run.seconds / max(p.seconds, 0.01):6.2f} {run.peak_mb / p.peak_mb:6.2f}")
                label = f"{kind.name}: 2^{n.bit_length() - 1} rows" if kind.by_rows else kind.name
                print(f"{label[:58]:58} {size / MB:8.2f} {run.seconds:7.2f} {run.peak_mb:8.1f} {extra:7.1f} "
                      f"{run.code:>4}  {peer}", flush=True)
                points.append((n if kind.by_rows else size, size, run.seconds, extra))
                if not kind.by_rows:
                    path.unlink()
            if len(points) > 1:
                verdicts.append(verdict(kind, base, points))
    print()
    print("\n".join(verdicts))
    return 0 if all("NOT LINEAR" not in v for v in verdicts) else 1


#: Below these the differences between runs are noise (the interpreter's start, the allocator's arenas).
WORK_FLOOR_S = 0.05
MEMORY_FLOOR_MB = 2.0
#: Growth exponents up to this count as linear (a quadratic cost shows as 2).
LINEAR = 1.25


def exponent(x0: float, x1: float, y0: float, y1: float, floor: float) -> float:
    """How ``y`` grows with ``x`` between two points, as the exponent ``k`` of ``y ~ x**k`` (values below
    ``floor`` taken as ``floor``: 0 for a cost that stays within it)."""
    return math.log(max(y1, floor) / max(y0, floor)) / math.log(x1 / x0)


def verdict(kind: Kind, base: Run, points: list[tuple[int, int, float, float]]) -> str:
    """A kind's growth exponents of work (less the command's start on a small file) and memory against the file
    (or the declared rows), and its constants at the largest size."""
    (n0, _, t0, m0), (n1, s1, t1, m1) = points[0], points[-1]
    work = exponent(n0, n1, t0 - base.seconds, t1 - base.seconds, WORK_FLOOR_S)
    memory = exponent(n0, n1, m0, m1, MEMORY_FLOOR_MB)
    ok = work <= LINEAR and memory <= LINEAR
    if kind.by_rows:
        constants = (f"{max(0.0, t1 - base.seconds):.2f} CPU s and {m1:.1f} MB more than the file as written, "
                     "whatever it declares")
    else:
        constants = (f"{max(0.0, t1 - base.seconds) / (s1 / MB):.3f} CPU s and {m1 / (s1 / MB):.2f} MB per MB of "
                     "file")
    return (f"{kind.name}: {'declared rows' if kind.by_rows else 'file'} x{n1 / n0:,.0f}: work ~ size^{work:.2f}, "
            f"memory ~ size^{memory:.2f}: {'linear or better' if ok else 'NOT LINEAR'}; {constants}")


if __name__ == "__main__":
    start = time.monotonic()
    code = main()
    print(f"(bench/hostile.py: {time.monotonic() - start:.0f} s)")
    sys.exit(code)
