#!/usr/bin/env python3
"""Benchmark: importing big pcapng files into a wire source, in bounded memory, beside Wireshark's capinfos.

Writes pcapng files of 1500-byte nicrig stream frames (nanosecond stamps, nicrig's own writer) of the
sizes asked for (``--gigabytes 0.25,1,4``; 10 for the issue's 10 GB case, given the disk), then, for
each, in one run on this machine:

- ``nicrig import FILE -o SET.h5`` (every frame read, its octets stored chunk by chunk);
- ``capinfos FILE`` (Wireshark's C reader going over every frame, the peer);
- ``nicrig decode SET.h5`` (the ethernet table of every frame).

and prints, per size and command, the wall time, the frames per second and the peak resident memory
(GNU time's, through bench/decode.py's ``_child``), and nicrig's time over capinfos's. Bounded memory shows as
a peak that stays flat while the file grows. Paste the table into docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import numpy as np
from decode import _child  # bench/decode.py beside this script: a child's wall time and peak memory

NICRIG = [sys.executable, "-m", "nicrig"]
FRAME_BYTES = 1514


def write_capture(path: Path, gigabytes: float) -> int:
    """A pcapng of nicrig stream frames (UDP, 1472-byte payloads), ~``gigabytes``; how many frames."""
    from nicrig.acquisition.pcap import FLAG_OUTBOUND, PcapngWriter
    from nicrig.udpmon.payload import Kind, make_payload

    rng = np.random.default_rng(1)
    head = bytes.fromhex("00601d00000200601d0000010800" "450005dc000040004011" "0000c6120001c6130001"
                         "1389138905c80000")
    fill = make_payload(1472, Kind.STREAM, 0, 1, rng)
    frames = int(gigabytes * 1e9 / (FRAME_BYTES + 44))
    t0 = 1_764_000_000 * 10 ** 9
    with open(path, "wb", buffering=1 << 24) as f:
        w = PcapngWriter(f, application="bench/wire.py")
        k = w.add_interface(name="tap", tsresol=9)
        for i in range(frames):
            data = head + fill[:8] + (i & 0xFFFFFFFF).to_bytes(4, "big") + fill[12:]
            w.write(k, t0 + 12_304 * i, data, flags=FLAG_OUTBOUND)
    return frames


def measure(argv: list[str]) -> tuple[float, int]:
    """Wall time (s) and peak resident memory (MiB) of one command."""
    run = _child(argv)
    return run["wall"], int(run["rss"]) // (1 << 20)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gigabytes", default="0.25,1,4", help="file sizes to import, comma separated")
    ap.add_argument("--folder", type=Path, default=None, help="where to write the files (default: a temporary one)")
    args = ap.parse_args()
    sizes = [float(g) for g in args.gigabytes.split(",")]
    rows = []
    with tempfile.TemporaryDirectory(dir=args.folder) as tmp:
        for gb in sizes:
            cap, out = Path(tmp) / f"cap{gb:g}.pcapng", Path(tmp) / f"set{gb:g}.h5"
            frames = write_capture(cap, gb)
            size = cap.stat().st_size
            ci_t, ci_m = measure(["capinfos", str(cap)])
            im_t, im_m = measure([*NICRIG, "import", str(cap), "-o", str(out)])
            de_t, de_m = measure([*NICRIG, "decode", str(out)])
            rows.append((size, frames, ci_t, ci_m, im_t, im_m, de_t, de_m))
            cap.unlink()
            out.unlink()
            for extra in Path(tmp).glob("*.derived.h5"):
                extra.unlink()
    print(f"load average {os.getloadavg()[0]:.1f} ({os.cpu_count()} CPUs)")
    print("| file | frames | capinfos (s, MiB) | nicrig import (s, MiB) | import / capinfos | import frames/s "
          "| nicrig decode (s, MiB) |")
    print("|---|---|---|---|---|---|---|")
    for size, frames, ci_t, ci_m, im_t, im_m, de_t, de_m in rows:
        print(f"| {size / 1e9:.2f} GB | {frames:,} | {ci_t:.1f}, {ci_m} | {im_t:.1f}, {im_m} | {im_t / ci_t:.1f} "
              f"| {frames / im_t:,.0f} | {de_t:.1f}, {de_m} |")


if __name__ == "__main__":
    sys.exit(main())
