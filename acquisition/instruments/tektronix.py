"""Tektronix 4, 5 and 6 Series MSO: the digital channels of logic probes (FlexChannels) over SCPI.

The commands, from the 4/5/6 Series MSO programmer manuals:

* setup: ``HEADer OFF``; ``ACQuire:STATE OFF``; ``ACQuire:STOPAfter SEQuence``;
  ``HORizontal:MODE MANual``, ``HORizontal:MODE:SAMPLERate <Hz>``,
  ``HORizontal:MODE:RECOrdlength <points>``, ``HORizontal:POSition <percent>``
  (the trigger's place in the record); ``CH<x>:DIGital<n>:THReshold <V>`` per
  wired bit; ``DISplay:GLObal:CH<x>:STATE ON``; ``TRIGger:A:TYPe EDGE``,
  ``TRIGger:A:EDGE:SOUrce CH<x>_D<n>|AUXiliary``,
  ``TRIGger:A:EDGE:SLOpe RISe|FALL|EITHer``.
* acquire: ``ACQuire:STATE ON``, then poll ``ACQuire:STATE?`` until 0.
* read: per FlexChannel ``DATa:SOUrce CH<x>_DAll``, ``DATa:ENCdg RPBinary``,
  ``DATa:WIDth 1`` (one byte per point, D7 the most significant bit),
  ``WFMOutpre?`` (kept verbatim), ``WFMOutpre:NR_Pt?``, ``:XINcr?``,
  ``:XZEro?``, ``:PT_Off?`` (point ``i`` is at ``XZEro + XINcr * (i - PT_Off)``);
  then in batches ``DATa:STARt <a>``, ``DATa:STOP <b>`` and ``CURVe?``, whose
  block header gives its digit count as a hexadecimal digit.
* errors: ``*ESR?``; when it shows an error bit, ``ALLEv?`` lists the events.
"""

from __future__ import annotations

import re

from nicrig.acquisition.instruments.driver import (
    InstrumentError,
    Progress,
    RecordInfo,
    ScpiInstrument,
    Settings,
    trigger_sample,
)
from nicrig.acquisition.instruments.probemap import PodAssembler

SLOPES = {"rising": "RISe", "falling": "FALL", "either": "EITHer"}
#: Command, execution, device-dependent and query error bits of the Standard Event Status Register.
ERROR_BITS = 32 | 16 | 8 | 4
_EVENT = re.compile(r'([+-]?\d+)\s*,\s*"([^"]*)"')


def parse_events(text: str) -> list[str]:
    """``ALLEv?``'s ``CODE,"MESSAGE"`` pairs, without the 'no events' codes 0 and 1."""
    return [f'{c},"{m}"' for c, m in _EVENT.findall(text) if int(c) not in (0, 1)]


def last_number(text: str) -> float:
    """The number a query answered (a header, if the instrument still sends one, is skipped)."""
    m = re.search(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?\s*$", text)
    if not m:
        raise InstrumentError(f"expected a number, got {text[:80]!r}")
    return float(m[0])


class TektronixMso(ScpiInstrument):
    model = "tektronix-mso5"
    manufacturers = r"^TEKTRONIX"
    models = r"^MSO5\d"
    pods = 8
    hex_count = True

    def identify(self):  # type: ignore[no-untyped-def]
        ident = super().identify()
        digits = re.match(r"^MSO\d(\d)", ident.model.upper())
        if digits:
            self.pods = int(digits[1])  # MSO54: 4 FlexChannels, MSO58: 8
        return ident

    def read_errors(self) -> list[str]:
        if not int(last_number(self.conn.query("*ESR?"))) & ERROR_BITS:
            return []
        return parse_events(self.conn.query("ALLEv?"))

    def setup_commands(self, settings: Settings) -> list[str]:
        pm, trig = settings.probe_map, settings.trigger
        if trig.signal is None:
            source = "AUXiliary"
        else:
            pod, bit = pm.where(trig.signal)
            source = f"CH{pod}_D{bit}"
        cmds = ["HEADer OFF", "ACQuire:STATE OFF", "ACQuire:STOPAfter SEQuence", "HORizontal:MODE MANual",
                f"HORizontal:MODE:SAMPLERate {settings.sample_rate_hz:.10E}",
                f"HORizontal:MODE:RECOrdlength {settings.record_length}",
                f"HORizontal:POSition {trig.position * 100:.6g}"]
        cmds += [f"CH{p}:DIGital{b}:THReshold {settings.threshold_v:g}" for p, b in sorted(pm.signals)]
        cmds += [f"DISplay:GLObal:CH{p}:STATE ON" for p in pm.pods]
        return cmds + ["TRIGger:A:TYPe EDGE", f"TRIGger:A:EDGE:SOUrce {source}",
                       f"TRIGger:A:EDGE:SLOpe {SLOPES[trig.slope]}"]

    def actual_rate(self) -> float:
        return last_number(self.conn.query("HORizontal:MODE:SAMPLERate?"))

    def arm(self) -> None:
        self.conn.write("ACQuire:STATE ON")
        self.info = None

    def done(self) -> bool:
        return int(last_number(self.conn.query("ACQuire:STATE?"))) == 0

    def _select(self, pod: int) -> None:
        for cmd in (f"DATa:SOUrce CH{pod}_DAll", "DATa:ENCdg RPBinary", "DATa:WIDth 1"):
            self.conn.write(cmd)

    def record_info(self) -> RecordInfo:
        preambles, geometry = {}, []
        for pod in self.settings.probe_map.pods:  # type: ignore[union-attr]
            self._select(pod)
            self.conn.write("DATa:STARt 1")
            self.conn.write(f"DATa:STOP {self.settings.record_length}")  # type: ignore[union-attr]
            preambles[f"CH{pod}_DAll"] = self.conn.query("WFMOutpre?")
            geometry.append(tuple(last_number(self.conn.query(f"WFMOutpre:{f}?"))
                                  for f in ("NR_Pt", "XINcr", "XZEro", "PT_Off")))
        if len(set(geometry)) != 1:
            raise InstrumentError(f"{self.label}: the FlexChannels' preambles disagree: {preambles}")
        points, xincr, xzero, pt_off = geometry[0]
        if points < 0 or not xincr > 0:
            raise InstrumentError(f"{self.label}: {points:g} points {xincr:g} s apart: {preambles}")
        self.info = RecordInfo(1.0 / xincr, int(points), trigger_sample(xzero, xincr, pt_off), preambles)
        return self.info

    def fetch(self, assembler: PodAssembler, progress: Progress | None = None) -> None:
        def select(pod: int, first: int, last: int) -> None:
            self._select(pod)
            self.conn.write(f"DATa:STARt {first}")
            self.conn.write(f"DATa:STOP {last}")

        self.fetch_in_batches(assembler, progress, "CURVe?", select)


class TektronixMso4(TektronixMso):
    model = "tektronix-mso4"
    models = r"^MSO4\d"


class TektronixMso6(TektronixMso):
    model = "tektronix-mso6"
    models = r"^MSO6\d"
