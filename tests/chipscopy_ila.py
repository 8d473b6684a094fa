"""Write a Vivado-style ILA CSV with AMD's ChipScoPy (``ILAWaveform.export_waveform``).

Run in the folder ``make venv`` installs ChipScoPy into (``PYTHONPATH=.venv/chipscopy``):

    python tests/chipscopy_ila.py WAVEFORM.json SAMPLES.bin OUT.csv

``WAVEFORM.json`` holds ``width`` (bits a sample), ``sample_count``, ``window_size``,
``trigger_position`` (one per window), ``include_gap``, and ``probes``: ``[name, first bit,
width, is_bus]`` each; ``SAMPLES.bin`` the samples, ``ceil(width / 8)`` little-endian bytes
each, bit ``k`` of a sample being bit ``k`` of the ILA's data word (ChipScoPy's layout).
"""

import json
import sys

from chipscopy.api.ila import ILABitRange
from chipscopy.api.ila.ila_waveform import ILAWaveform, ILAWaveformProbe


def main() -> None:
    spec = json.loads(open(sys.argv[1], encoding="utf-8").read())
    data = bytearray(open(sys.argv[2], "rb").read())
    probes = {}
    for name, first, width, is_bus in spec["probes"]:
        probes[name] = ILAWaveformProbe(name, "", [ILABitRange(first, width)], bool(is_bus),
                                        width - 1 if is_bus else None, 0 if is_bus else None)
    waveform = ILAWaveform(width=spec["width"], sample_count=spec["sample_count"],
                           trigger_position=spec["trigger_position"], window_size=spec["window_size"],
                           probes=probes, data=data, gap_index=spec.get("gap_index"))
    waveform.export_waveform("CSV", sys.argv[3], include_gap=bool(spec.get("include_gap")))


if __name__ == "__main__":
    main()
